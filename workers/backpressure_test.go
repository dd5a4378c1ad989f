package workers

import (
	"testing"
	"time"
)

// TestBackpressureReleases: a signal pauses the spouts until its worker
// releases it or it ages past bpHold, and one worker's release does not
// lift another's signal.
func TestBackpressureReleases(t *testing.T) {
	b := newBackpressure(3)
	now := time.Unix(1000, 0)
	if b.level(now) != noPressure {
		t.Fatal("paused with no signal")
	}
	b.on(1, now, queuesFull)
	if b.level(now.Add(bpCheckEvery)) != queuesFull {
		t.Fatal("a fresh signal does not pause")
	}
	b.off(1)
	if b.level(now.Add(bpCheckEvery)) != noPressure {
		t.Fatal("a released signal still pauses: the spouts wait out bpHold after the queues drained")
	}
	b.on(0, now, queuesFull)
	b.on(2, now, queuesFull)
	b.off(0)
	if b.level(now.Add(bpCheckEvery)) != queuesFull {
		t.Fatal("worker 0's release lifted worker 2's signal")
	}
	if b.level(now.Add(bpHold+time.Millisecond)) != noPressure {
		t.Fatal("a signal older than bpHold, never released (its worker crashed), still pauses")
	}
}

// TestBackpressureLevels: full queues anywhere outrank full logs, and a
// worker's latest signal replaces its earlier one.
func TestBackpressureLevels(t *testing.T) {
	b := newBackpressure(2)
	now := time.Unix(1000, 0)
	b.on(0, now, logsFull)
	if got := b.level(now); got != logsFull {
		t.Fatalf("full logs signalled: level %d, want logsFull", got)
	}
	b.on(1, now, queuesFull)
	if got := b.level(now); got != queuesFull {
		t.Fatalf("full queues beside full logs: level %d, want queuesFull", got)
	}
	b.on(1, now, logsFull)
	if got := b.level(now); got != logsFull {
		t.Fatalf("worker 1's queues drained, its logs still full: level %d, want logsFull", got)
	}
	b.off(0)
	b.off(1)
	if got := b.level(now); got != noPressure {
		t.Fatalf("both released: level %d, want none", got)
	}
}
