package workers

import (
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/ackflow/ackflow/wire"
)

// Loss recovery between tasks (DESIGN.md section 6b), at-least-once only.
//
// Every frame carries a sequence number per sender and destination. The
// receiver's frameFilter notices a gap, or a sender's high-water mark (HWM)
// above what arrived, and after a short grace for reordering sends a NACK
// naming the missing frames. The sender resends them from a bounded buffer
// of recent frames. A lost frame therefore costs about the grace period
// plus a round trip, not the message timeout; the timeout remains the last
// resort, for a frame that fell out of the buffer or whose NACKs kept
// getting lost. docs/design-notes.md says why retransmission was chosen
// over failing the trees of a lost frame.

const (
	// probeQuiet is how long a destination has had no frame from the
	// sender when it gets the sender's high-water mark, so that the loss of
	// the last frames of a burst is noticed; later marks follow at doubling
	// intervals. While frames flow no mark is sent: the next frame reveals
	// a gap by its sequence number.
	probeQuiet = 5 * time.Millisecond
	// maxProbes is how many high-water marks follow a destination's last
	// frame, the last about 5 s after it: a lost mark is covered by the
	// next one.
	maxProbes = 10
	// probeEvery is how often a sender looks for destinations that went
	// quiet, and checkEvery how often a receiver looks at its gaps: each
	// about every linger tick, so that a lost frame waits for the grace
	// period, not for a timer.
	probeEvery = time.Millisecond
	checkEvery = time.Millisecond
)

// resendBuffer keeps one task's most recent frames, up to a byte bound, so
// that a NACK can be answered. Without chaos it keeps the encoded bytes of
// frames published to NATS, in a ring of byte chunks that the frames are
// encoded into (tail) before they are published: frames handed to a task
// of the same worker go over a Go channel and cannot be lost, and byte
// chunks cost no allocation per frame and hold no pointers for the GC to
// scan (an allocation per frame showed in tail latency). With chaos, which
// drops frames before they are encoded and drops local frames too, it
// keeps the frames themselves.
type resendBuffer struct {
	keepFrames bool
	limit      int64

	chunks  [][]byte    // oldest first; frames are written into the last
	first   uint64      // the number of chunks[0]; chunks are numbered in the order they are taken into use
	held    int64       // bytes of chunks
	write   int         // where the next encoding goes in the last chunk
	largest int         // the largest encoding kept so far
	sent    []sentFrame // oldest first from head
	head    int
	bytes   int64 // of kept frames (keepFrames)
}

type sentFrame struct {
	dst    int
	seq    uint64
	chunk  uint64      // the number of the chunk holding the encoding (without chaos)
	off, n int         // the encoding in its chunk (without chaos)
	at     int64       // when it was kept, in UnixNano (without chaos)
	frame  *wire.Frame // the frame (with chaos)
	size   int64       // estimated bytes of frame
}

func newResendBuffer(limit int64, keepFrames bool) *resendBuffer {
	return &resendBuffer{keepFrames: keepFrames, limit: limit}
}

// Sizing the ring. A receiver asks for a lost frame within milliseconds,
// and the sender's high-water marks that reveal the loss of a burst's last
// frames follow for about 5 s (maxProbes); a frame older than that is
// almost never asked for, and the message timeout covers it. So the ring
// starts with one small chunk and takes another, up to the limit, only
// when it would otherwise evict a frame younger than resendKeepFor: it
// settles at what the task publishes in that time. A fixed ring of the
// limit per task made a topology of 128 tasks hold 1 GiB of rings that its
// traffic never needed. Each new chunk is as large as the ring so far
// (from minResendRing), up to an eighth of the limit, so the ring doubles
// without moving what it holds (a contiguous ring that doubled copied its
// frames each time: 2% of the CPU of the benchmark's word count, whose
// runs start fresh rings), and evicting the oldest chunk to make room
// drops at most about an eighth of the kept frames.
const (
	minResendRing = 64 << 10
	resendKeepFor = 5 * time.Second
)

// tail returns the free end of the chunk being written, empty and with
// room for an encoding as large as the largest kept so far, for the
// caller to encode a frame into before keepBytes keeps it in place. It
// may evict the oldest chunk's frames to make the room.
func (b *resendBuffer) tail(now time.Time) []byte {
	if len(b.chunks) == 0 || len(b.chunks[len(b.chunks)-1])-b.write < b.largest {
		b.advance(max(b.largest, 1), now.UnixNano())
	}
	c := b.chunks[len(b.chunks)-1]
	return c[b.write:b.write:len(c)]
}

// keepBytes keeps a published frame's encoding: where it is, if enc was
// encoded into tail and fit, or else as a copy, evicting the oldest
// frames to make room. A frame larger than the limit is not kept.
func (b *resendBuffer) keepBytes(dst int, seq uint64, enc []byte, now time.Time) {
	n := len(enc)
	if int64(n) > b.limit || n == 0 {
		return
	}
	at := now.UnixNano()
	b.largest = max(b.largest, n)
	inPlace := false
	if len(b.chunks) > 0 {
		c := b.chunks[len(b.chunks)-1]
		inPlace = b.write < len(c) && n <= len(c)-b.write && &c[b.write] == &enc[0]
	}
	if !inPlace {
		if len(b.chunks) == 0 || len(b.chunks[len(b.chunks)-1])-b.write < n {
			b.advance(n, at)
		}
		copy(b.chunks[len(b.chunks)-1][b.write:], enc)
	}
	b.append(sentFrame{dst: dst, seq: seq, chunk: b.first + uint64(len(b.chunks)-1), off: b.write, n: n, at: at})
	b.write += n
}

// advance starts writing a chunk with room for n bytes (n at most the
// limit): a new one while the ring is below its limit and its oldest frame
// younger than resendKeepFor, or else the oldest chunk, whose frames are
// evicted.
func (b *resendBuffer) advance(n int, at int64) {
	for {
		size := b.chunkSize(n)
		young := b.head == len(b.sent) || at-b.sent[b.head].at < int64(resendKeepFor)
		if b.held+int64(size) <= b.limit && (young || len(b.chunks) == 0) {
			b.use(getRing(size))
			return
		}
		old := b.chunks[0]
		for b.head < len(b.sent) && b.sent[b.head].chunk == b.first {
			b.sent[b.head] = sentFrame{}
			b.head++
		}
		b.chunks[0] = nil
		b.chunks = b.chunks[1:]
		b.first++
		b.held -= int64(len(old))
		if len(old) >= n {
			b.use(old)
			return
		}
		putRing(old)
	}
}

// use makes c the chunk written, at its start.
func (b *resendBuffer) use(c []byte) {
	b.chunks = append(b.chunks, c)
	b.held += int64(len(c))
	b.write = 0
}

// chunkSize is the size of the next chunk to allocate for a frame of n
// bytes: as large as the ring so far, from minResendRing up to an eighth
// of the limit, and large enough for the frame.
func (b *resendBuffer) chunkSize(n int) int {
	most := int64(minResendRing)
	for most*2 <= b.limit/8 {
		most *= 2
	}
	most = min(most, max(b.limit/8, 1))
	size := max(min(int64(minResendRing), most), min(b.held, most))
	for size < int64(n) {
		size *= 2
	}
	return int(min(size, b.limit))
}

// release gives the chunks back to ringPool when the task has ended:
// nothing is resent from them any more.
func (b *resendBuffer) release() {
	for _, c := range b.chunks {
		putRing(c)
	}
	b.chunks, b.sent, b.head, b.write, b.held = nil, nil, 0, 0, 0
}

// ringPool holds resend chunks that tasks left behind or could not reuse,
// by size class (minResendRing << i), for the tasks that take a chunk of
// that size next. Every run, and in cluster mode every generation, starts
// its tasks with new rings that grow up to what 5 s of their traffic
// needs; the allocations and page faults of that growth were 15% of all
// bytes allocated in the benchmark's word count. sync.Pool lets the
// garbage collector take chunks nobody asks for again.
var ringPool [ringClasses]sync.Pool

const ringClasses = 16 // up to minResendRing << 15 = 2 GiB

// ringClass returns the size class of a chunk of n bytes, or -1 when n is
// not one (a chunk for a limit that is not minResendRing times a power of
// two).
func ringClass(n int) int {
	if n < minResendRing || n%minResendRing != 0 || bits.OnesCount(uint(n/minResendRing)) != 1 {
		return -1
	}
	if c := bits.TrailingZeros(uint(n / minResendRing)); c < ringClasses {
		return c
	}
	return -1
}

func getRing(n int) []byte {
	if c := ringClass(n); c >= 0 {
		if p, ok := ringPool[c].Get().(*[]byte); ok {
			return *p // its old contents lie outside every kept frame
		}
	}
	return make([]byte, n)
}

func putRing(ring []byte) {
	if c := ringClass(len(ring)); c >= 0 {
		ringPool[c].Put(&ring)
	}
}

func (b *resendBuffer) keepFrame(dst int, f *wire.Frame) {
	size := int64(64)
	switch f.Kind {
	case wire.KindData:
		for i := range f.Records {
			size += int64(memSize(0, len(f.Records[i].Values))) + 32*int64(len(f.Records[i].Values))
		}
	default:
		size += int64(f.Len()) * 32
	}
	b.append(sentFrame{dst: dst, seq: f.Seq, frame: f, size: size})
	b.bytes += size
	for b.bytes > b.limit && b.head < len(b.sent)-1 {
		b.bytes -= b.sent[b.head].size
		b.sent[b.head] = sentFrame{}
		b.head++
	}
}

func (b *resendBuffer) append(s sentFrame) {
	b.sent = append(b.sent, s)
	// Compact once the evicted prefix is as long as what is kept.
	if b.head > 64 && b.head*2 >= len(b.sent) {
		n := copy(b.sent, b.sent[b.head:])
		clear(b.sent[n:])
		b.sent = b.sent[:n]
		b.head = 0
	}
}

// find returns the kept frame sent to dst with sequence number seq.
func (b *resendBuffer) find(dst int, seq uint64) *sentFrame {
	for i := len(b.sent) - 1; i >= b.head; i-- {
		s := &b.sent[i]
		if s.dst != dst {
			continue
		}
		if s.seq == seq {
			return s
		}
		if s.seq < seq {
			return nil // sequence numbers grow per destination
		}
	}
	return nil
}

// encoding returns a kept frame's bytes (without chaos).
func (b *resendBuffer) encoding(s *sentFrame) []byte {
	return b.chunks[s.chunk-b.first][s.off : s.off+s.n]
}

// marks schedules one sender's high-water marks: after its last frame to a
// destination, the first once the destination has had no frame for
// probeQuiet, then at doubling intervals, maxProbes in all.
type marks struct {
	sent    []uint8     // per destination: marks sent since its last frame (notProbing: none due)
	due     []time.Time // per destination: when the next mark is due (zero: not yet seen quiet)
	probing []int       // destinations with marks still to send
	last    time.Time   // the last look
}

// notProbing marks a destination that is not in marks.probing.
const notProbing = 0xff

func newMarks(n int) marks {
	m := marks{sent: make([]uint8, n), due: make([]time.Time, n)}
	for i := range m.sent {
		m.sent[i] = notProbing
	}
	return m
}

// again restarts the marks for dst after a frame to it: the first is due
// probeQuiet after a look finds dst without a frame since this one.
func (m *marks) again(dst int) {
	if m.sent[dst] == notProbing {
		m.probing = append(m.probing, dst)
	}
	m.sent[dst] = 0
	m.due[dst] = time.Time{}
}

// look calls send for each destination whose next mark is due at now. It
// looks at most every probeEvery.
func (m *marks) look(now time.Time, send func(dst int)) {
	if now.Sub(m.last) < probeEvery {
		return
	}
	m.last = now
	for i := 0; i < len(m.probing); {
		dst := m.probing[i]
		if m.sent[dst] >= maxProbes {
			m.sent[dst] = notProbing
			m.probing[i] = m.probing[len(m.probing)-1]
			m.probing = m.probing[:len(m.probing)-1]
			continue
		}
		if m.due[dst].IsZero() {
			m.due[dst] = now.Add(probeQuiet) // a frame went to dst since the last look
		}
		if !now.Before(m.due[dst]) {
			m.sent[dst]++
			m.due[dst] = now.Add(probeQuiet << m.sent[dst])
			send(dst)
		}
		i++
	}
}

// probe sends high-water marks to the destinations that got frames lately
// and then none for a while. Frames to a task of this worker are lost only
// under chaos.
func (o *outbox) probe(now time.Time) {
	if o.resend == nil {
		return
	}
	o.marks.look(now, func(dst int) {
		if o.resend.keepFrames || o.w.r.plan.assign[dst] != o.w.slot {
			o.sendLink(dst, []wire.LinkMsg{{Type: wire.LinkHWM, Epoch: o.w.incarnation, Seq: o.seq[dst]}})
		}
	})
	if len(o.starts) > 0 {
		o.repeatStarts(now)
	}
}

// A moved slot's new owner meets senders that ran all along, and cannot
// tell which of their sequence numbers were meant for it: the frames sent
// to the owner that died, or to nobody while the slot moved, belong to
// trees the death notice failed, and asking for them would resend seconds
// of traffic. So it counts a sender's frames from the first that reaches it
// (frameFilter.newEpoch). When the frames before that one were lost too,
// their trees waited for the message timeout, and a checkpoint, which
// waits for every tree in flight, with them. The sender knows where its
// frames for the new owner start: at the sequence number it had when it
// learned of the move. It says so with a LinkStart, sent at once and
// repeated on the high-water marks' schedule (a lost one is covered by the
// next), and the receiver asks for what it missed from there.

// linkStart is a LinkStart still to repeat to dst.
type linkStart struct {
	dst  int
	msg  wire.LinkMsg
	sent int
	due  time.Time
}

// startFor notes that dst's slot now has incarnation epoch (it moved), and
// tells dst where this task's frames for it start.
func (o *outbox) startFor(dst int, epoch uint64) {
	o.dstEpochs[dst] = epoch
	st := linkStart{dst: dst, msg: wire.LinkMsg{Type: wire.LinkStart, Epoch: o.w.incarnation, Seq: o.seq[dst]}, sent: 1, due: time.Now().Add(probeQuiet)}
	if i := slices.IndexFunc(o.starts, func(s linkStart) bool { return s.dst == dst }); i >= 0 {
		o.starts[i] = st // it moved again before the last one was done
	} else {
		o.starts = append(o.starts, st)
	}
	o.sendLink(dst, []wire.LinkMsg{st.msg})
}

// repeatStarts sends the LinkStart messages that are due again.
func (o *outbox) repeatStarts(now time.Time) {
	for i := 0; i < len(o.starts); {
		st := &o.starts[i]
		if now.Before(st.due) {
			i++
			continue
		}
		o.sendLink(st.dst, []wire.LinkMsg{st.msg})
		if st.sent++; st.sent >= maxProbes {
			o.starts = slices.Delete(o.starts, i, i+1)
			continue
		}
		st.due = now.Add(probeQuiet << st.sent)
		i++
	}
}

// resendTo answers a NACK from dst: it sends the frames again that dst
// never received, as far as they are still kept.
func (o *outbox) resendTo(dst int, m wire.LinkMsg) {
	r := o.w.r
	if m.Epoch != o.w.incarnation || o.resend == nil {
		return // a NACK for frames of an earlier incarnation of this task
	}
	for s := m.Seq; s < m.Seq+m.Count && s <= o.seq[dst]; s++ {
		sf := o.resend.find(dst, s)
		if sf == nil {
			r.tc.resendMisses.Add(1)
			r.warn.Warn().Int("task", o.src).Int("to", dst).Uint64("seq", s).Msg("a lost frame is no longer kept for resending; its trees will time out (raise RetransmitBytes if this repeats)")
			continue
		}
		r.tc.resent.Add(1)
		if sf.frame != nil {
			// The receiver may have kept and changed the first copy's
			// slices; the records themselves are immutable.
			f := *sf.frame
			f.Records = append([]wire.Record(nil), f.Records...)
			o.deliver(dst, &f)
			continue
		}
		enc := o.resend.encoding(sf)
		if err := o.w.nc.Publish(r.subjects[dst], enc); err != nil {
			r.tc.publishErrors.Add(1)
			continue
		}
		r.tc.natsMsgsOut.Add(1)
		r.tc.natsBytesOut.Add(int64(len(enc)))
	}
}

// onLink handles a link frame addressed to this task.
func (b *base) onLink(f *wire.Frame) {
	for _, m := range f.Links {
		switch m.Type {
		case wire.LinkHWM:
			b.ff.hwm(f.Src, m.Epoch, m.Seq)
		case wire.LinkStart:
			b.ff.start(f.Src, m.Epoch, m.Seq)
		case wire.LinkNack:
			if int(f.Src) >= 0 && int(f.Src) < len(b.r.plan.tasks) {
				b.out.resendTo(int(f.Src), m)
			}
		}
	}
}

// linkTick runs loss recovery's timers: high-water marks out, NACKs for
// gaps in.
func (b *base) linkTick(now time.Time) {
	if !b.track {
		return
	}
	b.out.probe(now)
	if now.Sub(b.lastCheck) < checkEvery || len(b.ff.open) == 0 {
		return
	}
	b.lastCheck = now
	c := b.ff.check(now, b.r.loss, func(src int32, msgs []wire.LinkMsg) { b.out.sendLink(int(src), msgs) })
	b.r.tc.nacks.Add(c.nacks)
	if c.givenUp > 0 {
		b.r.tc.lostFrames.Add(c.givenUp)
		b.r.warn.Warn().Int("task", b.info.id).Int64("frames", c.givenUp).Msg("lost frames were not resent after repeated NACKs; their trees will time out and replay")
	}
}
