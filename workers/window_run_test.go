package workers_test

import (
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/workers"
)

// TestPendingWindowOpensOnlyForASaturatedSpout runs the overload test's
// topology (spout -> work -> sink, at-least-once with dedup, 2 workers)
// twice: offered far below what it takes, the spout's pending window stays
// at its smallest, an eighth of MaxSpoutPending; offered as much as it
// takes, the window holds the spout back and grows to the whole bound.
// Both runs deliver every record taken (runOverload checks it). The busy
// run lasts 2 s: a spout whose slow start ended at its first period (a
// machine busy enough that it spent that period emitting rather than
// held) waits for the held average before doubling, about half a second
// under -race with another program taking both processors, where the
// 600 ms this run lasted before left it at 512 in one run of ten.
func TestPendingWindowOpensOnlyForASaturatedSpout(t *testing.T) {
	bound := workers.DefaultConfig().MaxSpoutPending
	calm, _ := runOverload(t, overloadConfig{rate: 5000, dur: 600 * time.Millisecond, cost: time.Microsecond, capacity: 10_000})
	if got := calm.Component("offer").WindowPeak; got != int64(bound/8) {
		t.Errorf("5,000 records/s offered: the pending window reached %d; want it to stay at %d", got, bound/8)
	}
	busy, o := runOverload(t, overloadConfig{dur: 2 * time.Second, cost: 20 * time.Microsecond, capacity: 10_000_000})
	if got := busy.Component("offer").WindowPeak; got != int64(bound) {
		t.Errorf("offered as much as it takes (%d records taken): the pending window reached %d; want %d", o.emitted.Load(), got, bound)
	}
}

// TestPendingWindowOpensForTreesThatTakeLong: a paced spout whose trees
// take long for want of nothing but time (every frame delayed up to 80
// ms, and the resends the reordering brings: trees take about 0.2 s
// while the tasks idle) needs far more than the smallest window to keep
// up with its offer. The window holds it back for good, so it doubles
// once the held average says so, and the spout takes all but a sliver of
// what is offered; every record taken reaches the sink once (runOverload
// checks it against the offer). Without doublings after slow start it
// takes about a third.
func TestPendingWindowOpensForTreesThatTakeLong(t *testing.T) {
	const rate, dur = 10_000, 3 * time.Second
	bound := workers.DefaultConfig().MaxSpoutPending
	sum, o := runOverload(t, overloadConfig{rate: rate, dur: dur, cost: time.Microsecond, capacity: 200_000,
		chaos: chaos.Config{Delay: 80 * time.Millisecond, DelayProb: 1, Seed: 3}})
	if got := sum.Component("offer").WindowPeak; got <= int64(bound/8) {
		t.Errorf("trees delayed up to 80 ms at each hop: the pending window stayed at %d; want it above %d", got, bound/8)
	}
	t.Logf("frames delayed %d; tree latency p50 %v, p99 %v; window peak %d", sum.Chaos.FramesDelayed, sum.Component("offer").LatencyP50, sum.Component("offer").LatencyP99, sum.Component("offer").WindowPeak)
	offered := int64(rate * dur.Seconds())
	if lag := o.lag.Load(); lag > offered/20 {
		t.Errorf("%d of %d offered records were never taken: the window throttled the spout", lag, offered)
	}
}
