// Package heapfloor keeps the garbage collector's heap goal at or above a
// floor, so that a process whose live heap is small but which allocates
// fast does not collect many times a second.
//
// The Go collector starts a cycle when the heap reaches the live heap times
// 1+GOGC/100. An ackflow worker keeps little alive (bounded queues, logs
// and filters, often 10-30 MB) while it allocates per record, so even at
// GOGC=400 it collected several times a second, and every mark phase (about
// 10 ms on two cores, with assists from the allocating tasks) showed in the
// tail of the complete latency. With a floor the goal is
// max(floor, live*(1+GOGC/100)): a small live heap is collected once per
// floor's worth of allocation, and a large one exactly as GOGC says.
//
// This is the tuning the Go GC guide describes with GOMEMLIMIT, done the
// other way round: GOMEMLIMIT caps the heap, a floor raises the goal of a
// small one. It works by setting GOGC after every cycle (one finalizer per
// cycle and one SetGCPercent when the figure moves by more than a tenth), as
// Uber's GC tuner does. A GOMEMLIMIT the user sets still wins: the collector
// runs when the limit is near, whatever the goal.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Tuner keeps the heap goal at or above a floor until Stop.
type Tuner struct {
	floor   uint64
	percent int // GOGC when the live heap is large enough

	mu      sync.Mutex
	stopped bool
	current int // the GOGC last set
	samples []metrics.Sample
}

// Start keeps the heap goal at or above floor bytes, with percent as GOGC
// once that alone puts the goal above the floor. It sets GOGC at once and after
// every collection. A floor of 0 only sets GOGC to percent.
func Start(floor uint64, percent int) *Tuner {
	t := &Tuner{floor: floor, percent: percent, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	t.current = percent
	debug.SetGCPercent(percent)
	if floor > 0 {
		t.adjust()
		t.arm()
	}
	return t
}

// sentinel is allocated once per cycle; its finalizer runs after the cycle
// that found it unreachable. It holds a pointer so that it is never a tiny
// allocation, whose finalizers may never run.
type sentinel struct {
	t *Tuner
	_ [8]byte
}

func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.t.adjust() {
			s.t.arm()
		}
	})
}

// adjust sets GOGC for the live heap of the last cycle, and reports whether
// the tuner still runs.
func (t *Tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	var v [3]uint64
	for i, s := range t.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return false // not this Go's metrics: leave GOGC as it is
		}
		v[i] = s.Value.Uint64()
	}
	want := Percent(v[0], v[0]+v[1]+v[2], t.floor, t.percent)
	// A new figure only when it moves by more than a tenth: the live heap
	// of consecutive cycles differs a little every time.
	if diff := want - t.current; diff*10 > t.current || -diff*10 > t.current {
		t.current = want
		debug.SetGCPercent(want)
	}
	return true
}

// Percent is the GOGC that puts the heap goal at max(floor, the goal of
// percent). The collector's goal is live + scannable*GOGC/100, where live is
// the heap marked live by the last cycle and scannable adds the stacks and
// globals it scanned (a test binary's globals alone can be megabytes, so
// leaving them out overshoots a floor many times over).
func Percent(live, scannable, floor uint64, percent int) int {
	if scannable == 0 || floor <= live {
		return percent
	}
	need := (floor - live) * 100 / scannable
	// The collector's goal is never below its heap minimum, 4 MiB times
	// GOGC/100: past floor/4 MiB percent that minimum, not the heap, sets
	// the goal, and it would overshoot the floor (a nearly empty heap).
	need = min(need, floor*100/heapMinimum)
	return max(percent, int(need))
}

// heapMinimum is the Go collector's smallest heap goal at GOGC=100.
const heapMinimum = 4 << 20

// Stop ends the tuning and sets GOGC back to the tuner's percent.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	t.current = t.percent
	debug.SetGCPercent(t.percent)
}
