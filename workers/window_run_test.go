package workers_test

import (
	"testing"
	"time"

	"github.com/ackflow/ackflow/workers"
)

// TestPendingWindowOpensOnlyForASaturatedSpout runs the overload test's
// topology (spout -> work -> sink, at-least-once with dedup, 2 workers)
// twice: offered far below what it takes, the spout's pending window stays
// at its smallest, an eighth of MaxSpoutPending; offered as much as it
// takes, the window holds the spout back and grows to the whole bound.
// Both runs deliver every record taken (runOverload checks it).
func TestPendingWindowOpensOnlyForASaturatedSpout(t *testing.T) {
	bound := workers.DefaultConfig().MaxSpoutPending
	calm, _ := runOverload(t, overloadConfig{rate: 5000, dur: 600 * time.Millisecond, cost: time.Microsecond, capacity: 10_000})
	if got := calm.Component("offer").WindowPeak; got != int64(bound/8) {
		t.Errorf("5,000 records/s offered: the pending window reached %d; want it to stay at %d", got, bound/8)
	}
	busy, o := runOverload(t, overloadConfig{dur: 600 * time.Millisecond, cost: 20 * time.Microsecond, capacity: 10_000_000})
	if got := busy.Component("offer").WindowPeak; got != int64(bound) {
		t.Errorf("offered as much as it takes (%d records taken): the pending window reached %d; want %d", o.emitted.Load(), got, bound)
	}
}
