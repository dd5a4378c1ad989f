package workers

import "github.com/ackflow/ackflow/wire"

// window is how many recent frame sequence numbers a receiver remembers per
// sender. Chaos and NATS reconnects reorder frames by far fewer than this.
const window = 1024

// frameWindow remembers which of one sender's last `window` frames arrived.
type frameWindow struct {
	epoch uint64
	high  uint64 // highest sequence number seen in this epoch
	bits  [window / 64]uint64
}

// frameFilter drops frames delivered twice. It is owned by one receiving
// task's goroutine.
type frameFilter struct {
	wins []frameWindow // by sender task
}

func newFrameFilter(tasks int) *frameFilter { return &frameFilter{wins: make([]frameWindow, tasks)} }

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
	case f.Epoch > w.epoch:
		*w = frameWindow{epoch: f.Epoch}
	}
	s := f.Seq
	if s == 0 {
		return true // an unsequenced frame (not sent by a runtime outbox)
	}
	if s > w.high {
		if s-w.high >= window {
			w.bits = [window / 64]uint64{}
		} else {
			for q := w.high + 1; q < s; q++ {
				w.bits[(q%window)/64] &^= 1 << (q % 64)
			}
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
