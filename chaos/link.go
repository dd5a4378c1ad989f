package chaos

import (
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/wire"
)

// Send delivers a frame to a task: the real transport behind a Link.
type Send func(dst int, f *wire.Frame)

// Counters count what a chaos setting did, in frames and records.
type Counters struct {
	FramesDropped, RecordsDropped       atomic.Int64
	FramesDuplicated, RecordsDuplicated atomic.Int64
	FramesDelayed, FramesReordered      atomic.Int64
	InputsFailed                        atomic.Int64 // inputs a bolt failed before running user code (Config.Fail)
}

// Link sits between one sending task and the transport. It is owned by that
// task's goroutine: Send and Poll must not be called concurrently. Delayed
// frames are released by Poll, which the owner calls on its timer, so no
// goroutine or timer outlives the task.
type Link struct {
	cfg  Config
	rng  *rand.Rand
	next Send
	cnt  *Counters

	held    *heldFrame // a frame held back for reordering
	delayed []delayedFrame
	// dups are the duplicated frames of which a copy is still held: true
	// once the other copy has gone out (HeldRecords).
	dups map[*wire.Frame]bool
}

type heldFrame struct {
	dst int
	f   *wire.Frame
}

type delayedFrame struct {
	due time.Time
	dst int
	f   *wire.Frame
}

// NewLink wraps next for the task src.
func NewLink(cfg Config, src int, next Send, cnt *Counters) *Link {
	return &Link{
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(cfg.Seed, uint64(src)*0x9e3779b97f4a7c15+1)),
		next: next,
		cnt:  cnt,
	}
}

// Send applies the configured failures to one frame.
func (l *Link) Send(dst int, f *wire.Frame) {
	n := int64(f.Len())
	if l.cfg.Drop > 0 && l.rng.Float64() < l.cfg.Drop {
		l.cnt.FramesDropped.Add(1)
		if f.Kind == wire.KindData {
			l.cnt.RecordsDropped.Add(n)
		}
		return
	}
	if l.cfg.Dup > 0 && l.rng.Float64() < l.cfg.Dup {
		l.cnt.FramesDuplicated.Add(1)
		if f.Kind == wire.KindData {
			l.cnt.RecordsDuplicated.Add(n)
		}
		if l.dups == nil {
			l.dups = map[*wire.Frame]bool{}
		}
		l.dups[f] = false
		l.route(dst, f)
	}
	l.route(dst, f)
}

func (l *Link) route(dst int, f *wire.Frame) {
	if l.cfg.Reorder > 0 {
		if l.held != nil {
			// The held frame goes after the one that overtook it.
			h := l.held
			l.held = nil
			l.delay(dst, f)
			l.delay(h.dst, h.f)
			return
		}
		if l.rng.Float64() < l.cfg.Reorder {
			l.cnt.FramesReordered.Add(1)
			l.held = &heldFrame{dst: dst, f: f}
			return
		}
	}
	l.delay(dst, f)
}

func (l *Link) delay(dst int, f *wire.Frame) {
	if l.cfg.Delay > 0 && l.rng.Float64() < l.cfg.DelayProb {
		d := time.Duration(l.rng.Int64N(int64(l.cfg.Delay) + 1))
		l.cnt.FramesDelayed.Add(1)
		l.delayed = append(l.delayed, delayedFrame{due: time.Now().Add(d), dst: dst, f: f})
		return
	}
	l.pass(dst, f)
}

// pass sends a frame on, noting when a duplicated frame's first copy goes.
func (l *Link) pass(dst int, f *wire.Frame) {
	if len(l.dups) > 0 {
		if out, ok := l.dups[f]; ok {
			if out {
				delete(l.dups, f) // both copies are out
			} else {
				l.dups[f] = true
			}
		}
	}
	l.next(dst, f)
}

// Poll releases delayed frames that are due, and a frame held for
// reordering when nothing overtook it. It returns how many frames are still
// waiting.
func (l *Link) Poll(now time.Time) int {
	if l.held != nil {
		h := l.held
		l.held = nil
		l.pass(h.dst, h.f)
	}
	if len(l.delayed) == 0 {
		return 0
	}
	sort.SliceStable(l.delayed, func(i, j int) bool { return l.delayed[i].due.Before(l.delayed[j].due) })
	i := 0
	for ; i < len(l.delayed) && !l.delayed[i].due.After(now); i++ {
		l.pass(l.delayed[i].dst, l.delayed[i].f)
	}
	l.delayed = append(l.delayed[:0], l.delayed[i:]...)
	return len(l.delayed)
}

// Waiting reports how many frames the link still holds.
func (l *Link) Waiting() int {
	n := len(l.delayed)
	if l.held != nil {
		n++
	}
	return n
}

// HeldRecords reports how many records the data frames the link still
// holds carry: a task that stops with them held never sends them. A
// duplicated frame counts once, and not at all when its other copy went
// out.
func (l *Link) HeldRecords() int64 {
	var n int64
	counted := map[*wire.Frame]bool{}
	count := func(f *wire.Frame) {
		if f.Kind != wire.KindData || counted[f] || l.dups[f] {
			return
		}
		counted[f] = true
		n += int64(len(f.Records))
	}
	if l.held != nil {
		count(l.held.f)
	}
	for _, d := range l.delayed {
		count(d.f)
	}
	return n
}
