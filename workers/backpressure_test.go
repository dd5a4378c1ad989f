package workers

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestBackpressureReleases: a signal pauses the spouts until its worker
// releases it or it ages past bpHold, and one worker's release does not
// lift another's signal.
func TestBackpressureReleases(t *testing.T) {
	b := backpressure{last: make([]atomic.Int64, 3)}
	now := time.Unix(1000, 0)
	if b.any(now) {
		t.Fatal("paused with no signal")
	}
	b.on(1, now)
	if !b.any(now.Add(bpCheckEvery)) {
		t.Fatal("a fresh signal does not pause")
	}
	b.off(1)
	if b.any(now.Add(bpCheckEvery)) {
		t.Fatal("a released signal still pauses: the spouts wait out bpHold after the queues drained")
	}
	b.on(0, now)
	b.on(2, now)
	b.off(0)
	if !b.any(now.Add(bpCheckEvery)) {
		t.Fatal("worker 0's release lifted worker 2's signal")
	}
	if b.any(now.Add(bpHold + time.Millisecond)) {
		t.Fatal("a signal older than bpHold, never released (its worker crashed), still pauses")
	}
}
