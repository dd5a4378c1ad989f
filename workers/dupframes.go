package workers

import (
	"time"

	"github.com/ackflow/ackflow/wire"
)

// window is how many recent frame sequence numbers a receiver remembers per
// sender. Chaos and NATS reconnects reorder frames by far fewer than this.
const window = 1024

// frameWindow remembers which of one sender's last `window` frames arrived,
// and what is known to be missing.
type frameWindow struct {
	epoch uint64
	high  uint64 // highest sequence number seen in this epoch
	// base: frames at or below it are never asked for again (they came
	// before this receiver existed, or were given up on).
	base uint64
	// expect is the highest sequence number the sender says it sent (its
	// high-water mark), which may be above high when the last frames were
	// lost.
	expect uint64
	bits   [window / 64]uint64

	open     bool      // listed in frameFilter.open
	noticed  time.Time // when check first saw the current gap
	lastNack time.Time
	nacks    int // NACKs sent in the current series
	// A series of NACKs starts at the oldest frame missing, nackFrom, and
	// covers the frames missing up to nackTo. It ends when nackFrom
	// arrives, and what is still missing then starts a series of its own;
	// or after maxNacks NACKs, which give up the frames up to nackTo. A
	// count per sender instead never ended while its frames kept getting
	// lost, so a frame lost just now was given up with the old ones
	// without ever being asked for (randshapes' seed 708: 15% of one-record
	// frames lost, thousands given up, and trees that never completed).
	nackFrom, nackTo uint64

	// In-order delivery of data frames (see frameFilter.inOrder): next is
	// the sequence number to deliver next, held the frames that came
	// before it was delivered.
	next uint64
	held map[uint64]*wire.Frame
}

// frameFilter drops frames delivered twice and, in at-least-once mode,
// notices frames that never arrived (DESIGN.md section 6b): a gap in the
// sequence numbers, or a sender's high-water mark above what arrived. It is
// owned by one receiving task's goroutine.
type frameFilter struct {
	wins  []frameWindow          // by sender task
	self  uint64                 // the receiving worker's incarnation
	track bool                   // look for lost frames
	open  []int32                // senders that may have a gap
	heldN int                    // frames held by inOrder
	known func(src int32) uint64 // see newFrameFilter
	// droppedRecords counts the records of held frames dropped because
	// their sender restarted, for the caller's accounting.
	droppedRecords int
}

// newFrameFilter returns the filter of a receiving task. known returns the
// incarnation of a sender's worker that the receiver knew when it started
// (nil: treat every sender as running before).
func newFrameFilter(tasks int, self uint64, track bool, known func(src int32) uint64) *frameFilter {
	return &frameFilter{wins: make([]frameWindow, tasks), self: self, track: track, known: known}
}

// admit reports whether f should be processed. A frame from an older
// incarnation of its sender than one already heard from is refused; so is
// a repeat of a frame in the window. A frame older than the window cannot be
// checked: strict (at-most-once) refuses it, otherwise it is let through.
func (ff *frameFilter) admit(f *wire.Frame, strict bool) bool {
	if f.Src < 0 || int(f.Src) >= len(ff.wins) {
		return false
	}
	w := &ff.wins[f.Src]
	switch {
	case f.Epoch < w.epoch:
		return false
	case f.Epoch > w.epoch && f.Seq == 0:
		// An unsequenced frame (a link frame) says nothing of where the
		// sender's sequence stands; taken for a sender at 0, it made a
		// restarted receiver ask for every frame the sender still kept,
		// all of them for the incarnation that died. The high-water mark
		// it carries, or the first sequenced frame, starts the epoch.
		return true
	case f.Epoch > w.epoch:
		ff.newEpoch(w, f.Src, f.Epoch, f.Seq-1)
	}
	s := f.Seq
	if s == 0 {
		return true // an unsequenced frame (link frames, or not from a runtime outbox)
	}
	if s > w.high {
		if s-w.high >= window {
			w.bits = [window / 64]uint64{}
		} else {
			for q := w.high + 1; q < s; q++ {
				w.bits[(q%window)/64] &^= 1 << (q % 64)
			}
		}
		if s > w.high+1 && s-1 > w.base {
			ff.watch(f.Src, w)
		}
		w.high = s
		w.bits[(s%window)/64] |= 1 << (s % 64)
		return true
	}
	if w.high-s >= window {
		return !strict
	}
	word, bit := (s%window)/64, uint64(1)<<(s%64)
	if w.bits[word]&bit != 0 {
		return false
	}
	w.bits[word] |= bit
	return true
}

// newEpoch starts tracking a new incarnation of a sender whose first frame
// seen has sequence number first+1 (or whose high-water mark is first+1).
// Its frames start at 1, so all of them can be asked for, unless this
// receiver is itself a restarted incarnation meeting, for the first time, a
// sender that was already running when the receiver started: then the
// earlier frames were addressed to the incarnation that died, whose trees
// the death notice failed. A sender of a later incarnation than the
// receiver knew at its start (a rollback restarts every worker) started
// after it, so all its frames are for this receiver.
func (ff *frameFilter) newEpoch(w *frameWindow, src int32, epoch, first uint64) {
	base := uint64(0)
	if w.epoch == 0 && ff.self > 1 && (ff.known == nil || epoch <= ff.known(src)) {
		base = first
	}
	ff.dropHeld(w)
	*w = frameWindow{epoch: epoch, high: base, base: base, expect: base, open: w.open, next: base + 1}
}

// maxHeld bounds the data frames one sender may have waiting for a gap to
// fill; past it the gap is given up and the frames go on out of order.
const maxHeld = 256

// inOrder keeps each sender's data frames in the order they were sent (as
// Storm and Flink deliver between two tasks): a frame that comes after a
// gap waits until the missing frames are resent, or until the gap is given
// up. f has passed admit. It returns the frames to process now, in order,
// in buf; nil while f waits. Frames without a sequence number, and every
// frame when loss is not tracked, pass at once.
func (ff *frameFilter) inOrder(f *wire.Frame, buf []*wire.Frame) []*wire.Frame {
	if !ff.track || f.Seq == 0 || f.Src < 0 || int(f.Src) >= len(ff.wins) {
		return append(buf, f)
	}
	w := &ff.wins[f.Src]
	switch {
	case f.Seq < w.next:
		return append(buf, f) // older than a gap given up on: late, but not lost
	case f.Seq > w.next:
		if w.held == nil {
			w.held = map[uint64]*wire.Frame{}
		}
		w.held[f.Seq] = f
		ff.heldN++
		if len(w.held) > maxHeld {
			return ff.release(w, buf)
		}
		return buf
	}
	buf = append(buf, f)
	w.next++
	return ff.drain(w, buf)
}

// drain appends the held frames that are next in sequence.
func (ff *frameFilter) drain(w *frameWindow, buf []*wire.Frame) []*wire.Frame {
	for len(w.held) > 0 {
		f, ok := w.held[w.next]
		if !ok {
			break
		}
		delete(w.held, w.next)
		ff.heldN--
		buf = append(buf, f)
		w.next++
	}
	return buf
}

// release gives up waiting for w's gap: its held frames go on in order.
func (ff *frameFilter) release(w *frameWindow, buf []*wire.Frame) []*wire.Frame {
	for len(w.held) > 0 {
		lowest := uint64(0)
		for s := range w.held {
			if lowest == 0 || s < lowest {
				lowest = s
			}
		}
		w.next = lowest
		buf = ff.drain(w, buf)
	}
	return buf
}

// released returns the frames held behind gaps that check gave up on.
func (ff *frameFilter) released(buf []*wire.Frame) []*wire.Frame {
	if ff.heldN == 0 {
		return buf
	}
	for i := range ff.wins {
		w := &ff.wins[i]
		if len(w.held) > 0 && w.base >= w.next {
			w.next = w.base + 1
			buf = ff.drain(w, buf)
		}
	}
	return buf
}

// dropHeld forgets frames held from an older incarnation of a sender.
func (ff *frameFilter) dropHeld(w *frameWindow) {
	ff.heldN -= len(w.held)
	for _, f := range w.held {
		ff.droppedRecords += len(f.Records)
	}
	w.held = nil
}

// watch lists a sender whose frames may be missing, for check.
func (ff *frameFilter) watch(src int32, w *frameWindow) {
	if ff.track && !w.open {
		w.open = true
		ff.open = append(ff.open, src)
	}
}

// linkWindow returns the window that a link message about src's frames of
// epoch applies to, starting the epoch at seq if it is new (fresh). It
// returns nil for an unknown sender or an older epoch, and when loss is
// not tracked.
func (ff *frameFilter) linkWindow(src int32, epoch, seq uint64) (w *frameWindow, fresh bool) {
	if src < 0 || int(src) >= len(ff.wins) || !ff.track {
		return nil, false
	}
	w = &ff.wins[src]
	switch {
	case epoch < w.epoch:
		return nil, false
	case epoch > w.epoch:
		ff.newEpoch(w, src, epoch, seq)
		return w, true
	}
	return w, false
}

// hwm applies a sender's high-water mark: it sent frames up to seq in epoch.
func (ff *frameFilter) hwm(src int32, epoch, seq uint64) {
	w, _ := ff.linkWindow(src, epoch, seq)
	if w == nil {
		return
	}
	if seq > w.expect {
		w.expect = seq
	}
	if seq > w.high {
		ff.watch(src, w)
	}
}

// start applies a sender's LinkStart: its frames of epoch for this
// receiver start after seq (link.go, startFor). A receiver that counted
// the sender's frames from a later one asks for those in between; one
// that counts from an earlier one (frames that reached it before the
// sender learned of the move) keeps that.
func (ff *frameFilter) start(src int32, epoch, seq uint64) {
	w, fresh := ff.linkWindow(src, epoch, seq)
	if w == nil || fresh || seq >= w.base || w.high-seq >= window {
		return // nothing to add, or beyond what the window tracks
	}
	w.base = seq
	ff.watch(src, w)
}

// lossConfig tunes check.
type lossConfig struct {
	grace    time.Duration // how long a gap may stay open before it is NACKed (reordering)
	renack   time.Duration // how long to wait for a retransmission before asking again the first time
	maxNacks int           // NACKs for one gap before giving up on it
}

// maxRenack bounds the wait between two NACKs of one gap.
const maxRenack = time.Second

// renackAfter is how long a gap NACKed n times waits before the next NACK:
// renack, doubling with each NACK, at most maxRenack. A frame lost on a
// healthy link is asked for again soon; a link that is down (a NATS
// reconnect takes a second or more) is asked for over seconds, not given
// up in a few hundred milliseconds: with the default 20 ms, ten NACKs span
// about 4 s, within the 5 s the sender keeps its frames.
func (c lossConfig) renackAfter(n int) time.Duration {
	if n < 1 {
		return 0
	}
	return min(c.renack<<min(n-1, 16), maxRenack)
}

// lossCounts are what check did, for the run's counters.
type lossCounts struct {
	nacks, givenUp int64
}

// check NACKs the gaps that stayed open for the grace period, calling nack
// with the sender and the missing ranges (valid only during the call). A gap
// NACKed maxNacks times is given up: its trees time out, the last resort.
func (ff *frameFilter) check(now time.Time, cfg lossConfig, nack func(src int32, msgs []wire.LinkMsg)) lossCounts {
	var c lossCounts
	var msgs []wire.LinkMsg
	for i := 0; i < len(ff.open); {
		src := ff.open[i]
		w := &ff.wins[src]
		msgs = w.missing(msgs[:0])
		switch {
		case len(msgs) == 0:
			w.open, w.noticed, w.nacks = false, time.Time{}, 0
			ff.open[i] = ff.open[len(ff.open)-1]
			ff.open = ff.open[:len(ff.open)-1]
			continue
		case w.noticed.IsZero():
			w.noticed = now
		case w.nacks > 0 && msgs[0].Seq > w.nackFrom:
			// The series' oldest frame came: what is still missing starts
			// a series of its own, after the grace period.
			w.nacks, w.noticed = 0, now
		case now.Sub(w.noticed) < cfg.grace || w.nacks > 0 && now.Sub(w.lastNack) < cfg.renackAfter(w.nacks):
		case w.nacks >= cfg.maxNacks:
			for _, m := range msgs {
				if m.Seq > w.nackTo {
					break
				}
				c.givenUp += int64(min(m.Count, w.nackTo-m.Seq+1))
			}
			w.base = max(w.base, w.nackTo)
			w.nacks, w.noticed = 0, now
			continue // the same check closes it, or starts the next series
		default:
			if w.nacks == 0 {
				last := msgs[len(msgs)-1]
				w.nackFrom, w.nackTo = msgs[0].Seq, last.Seq+last.Count-1
			}
			nack(src, msgs)
			w.lastNack = now
			w.nacks++
			c.nacks++
		}
		i++
	}
	return c
}

// maxRanges bounds the ranges one NACK carries; the rest follow once these
// are filled.
const maxRanges = 32

// missing appends the ranges of frames not received between the window's
// base and the highest sequence number seen or announced.
func (w *frameWindow) missing(out []wire.LinkMsg) []wire.LinkMsg {
	top := max(w.high, w.expect)
	lo := w.base + 1
	if w.high >= window && w.high-window+1 > lo {
		lo = w.high - window + 1 // older frames are no longer tracked
	}
	for s := lo; s <= top && len(out) < maxRanges; s++ {
		if s <= w.high && w.bits[(s%window)/64]&(1<<(s%64)) != 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Seq+out[n-1].Count == s {
			out[n-1].Count++
			continue
		}
		out = append(out, wire.LinkMsg{Type: wire.LinkNack, Epoch: w.epoch, Seq: s, Count: 1})
	}
	return out
}
