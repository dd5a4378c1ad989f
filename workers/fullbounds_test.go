package workers_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// fan is a stateful bolt that emits two outputs per input, each carrying
// size bytes. An input bad says is poison gets its first output only, and
// is then failed.
type fan struct {
	out  topology.Collector
	runs *runs
	size int
	bad  func(int64) bool
}

func (f *fan) Prepare(_ topology.TaskContext, out topology.Collector) error {
	f.out = out
	return nil
}

func (f *fan) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	f.runs.add(n)
	f.out.Emit(in, topology.Values{2 * n, make([]byte, f.size)})
	if f.bad != nil && f.bad(n) {
		f.out.Fail(in)
		return
	}
	f.out.Emit(in, topology.Values{2*n + 1, make([]byte, f.size)})
	f.out.Ack(in)
}

func (f *fan) Cleanup() error            { return nil }
func (f *fan) Snapshot() ([]byte, error) { return nil, nil }
func (f *fan) Restore([]byte) error      { return nil }

// runFull runs topo at-least-once on 2 workers with a short message
// timeout and the given bounds, and fails the test if it takes as long as
// the log entries of a failed tree live (logExpiry, 10 message timeouts):
// a replay that waits that long finds its entries gone and runs user code
// again.
func runFull(t *testing.T, topo *topology.Topology, configure func(*workers.Config)) *workers.Summary {
	t.Helper()
	const timeout = 500 * time.Millisecond
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee:      workers.AtLeastOnce,
		Workers:        2,
		MessageTimeout: timeout,
		Timeout:        time.Minute,
		Configure: func(c *workers.Config) {
			c.MaxAttempts = 0 // every record must arrive; none may be given up on
			configure(c)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Duration >= 10*timeout {
		t.Errorf("the run took %v, ten message timeouts or more: the replays waited for the full bound to empty by itself", sum.Duration.Round(time.Millisecond))
	}
	return sum
}

// TestFullOutputLogStillReplays: a stateful bolt's output log at its bound
// stops the spouts reading, not replaying. Only a failed tree's replay
// trims the entries the tree left in the log; held back, the replays
// waited until the entries expired (10 message timeouts), and then ran the
// bolt's user code again for inputs its dedup had seen (found by the
// randshapes hunt: exactly-once state counted those inputs twice).
func TestFullOutputLogStillReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 600
	ran := newRuns()
	sink := flowtest.NewSink().FailFirst(0.5)
	b := topology.NewBuilder("full-log")
	b.Spout("numbers", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i} }), 1).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fan{runs: ran, size: 1 << 10} }, 2).Input("numbers", topology.Shuffle()).Outputs("n", "blob")
	b.Bolt("sink", sink.StatefulBolt, 2).Input("fan", topology.Fields("n"))
	sum := runFull(t, build(t, b), func(c *workers.Config) { c.Log.MaxEntries = 16 })
	ran.expect(t, "fan", n, 1)
	expectSink(t, sink, 2*n, 1)
	c := sum.Component("fan")
	if c.LogExpired != 0 {
		t.Fatalf("%d of fan's log entries expired", c.LogExpired)
	}
	if c.LogPeakEntries < 16 {
		t.Fatalf("fan's log peaked at %d entries, never full: the test proves nothing", c.LogPeakEntries)
	}
	if sum.Component("sink").Failed == 0 {
		t.Fatal("the sink failed nothing: no replay was needed and the test proves nothing")
	}
}

// TestSpoutByteBoundStillReplays: the spout's bound on the bytes of its
// pending roots holds back reads and replays alike, yet never stalls: a
// failed root leaves the pending roots and their bytes until its replay,
// so even when every root in flight fails, the bound has room for the
// replays.
func TestSpoutByteBoundStillReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 400
	// Every first delivery fails: in time every root the spout holds is a
	// failed one.
	sink := flowtest.NewSink().FailFirst(1)
	b := topology.NewBuilder("full-spout")
	b.Spout("numbers", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i, make([]byte, 16<<10)} }), 1).Outputs("n", "blob")
	b.Bolt("sink", sink.StatefulBolt, 2).Input("numbers", topology.Shuffle())
	sum := runFull(t, build(t, b), func(c *workers.Config) { c.MaxPendingBytes = 256 << 10 })
	expectSink(t, sink, n, 1)
	if sum.Component("sink").Failed == 0 {
		t.Fatal("the sink failed nothing: no replay was needed and the test proves nothing")
	}
}

// poisonSink is a stateless sink that fails, on every attempt, the values bad
// says are poison, and counts the others.
type poisonSink struct {
	out  topology.Collector
	bad  func(int64) bool
	seen *runs
}

func (p *poisonSink) Prepare(_ topology.TaskContext, out topology.Collector) error {
	p.out = out
	return nil
}

func (p *poisonSink) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	if p.bad(n) {
		p.out.Fail(in)
		return
	}
	p.seen.add(n)
	p.out.Ack(in)
}

func (p *poisonSink) Cleanup() error { return nil }

// TestDeadLettersLeaveTheOutputLogs: a third of the roots carry a value
// that fails on every attempt, so they go to the dead letters after two.
// The stateful bolts logged their outputs for those roots' trees, or, for
// an input they failed themselves, a tombstone; nothing completes a failed
// tree, and with logs of 16 entries a few dead letters filled them and
// stopped the spouts reading until the entries expired, ten message
// timeouts later (runFull fails a run that long). The spout now tells the
// logs' tasks that a dead-lettered root's trees are over. In three shapes
// (the sink fails the poison behind the fan-out bolt alone, or behind
// another stateful bolt; the fan-out bolt fails it itself after a partial
// emit) no entry may expire, no stateful bolt may run an input more often
// than it failed, exactly the poisoned roots are dead-lettered, and every
// value of a root that is not poison reaches the sink.
func TestDeadLettersLeaveTheOutputLogs(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	const attempts = 2
	poison := func(i int64) bool { return i%3 == 0 } // the roots that fail
	for _, tc := range []struct {
		name     string
		counted  bool // a counter before fan
		fanFails bool // fan fails the poison, not the sink
	}{{"fan", false, false}, {"counter then fan", true, false}, {"fan fails", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ran, counted, seen := newRuns(), newRuns(), newRuns()
			sinkBad := func(v int64) bool { return poison(v / 2) } // fan's outputs 2i and 2i+1
			fanBad := func(int64) bool { return false }
			if tc.fanFails {
				sinkBad, fanBad = fanBad, poison
			}
			b := topology.NewBuilder("dead-log")
			b.Spout("numbers", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i} }), 1).Outputs("n")
			from := "numbers"
			if tc.counted {
				b.Bolt("counter", func() topology.Bolt { return &counter{runs: counted} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
				from = "counter"
			}
			b.Bolt("fan", func() topology.Bolt { return &fan{runs: ran, size: 64, bad: fanBad} }, 2).Input(from, topology.Fields("n")).Outputs("n", "blob")
			b.Bolt("sink", func() topology.Bolt { return &poisonSink{bad: sinkBad, seen: seen} }, 2).Input("fan", topology.Shuffle())
			sum := runFull(t, build(t, b), func(c *workers.Config) {
				c.Log.MaxEntries = 16
				c.MaxAttempts = attempts
				c.MaxSpoutPending = 8 // the roots come while the logs are full
			})
			fc := sum.Component("fan")
			t.Logf("%v: %d dead-lettered; fan's log peaked at %d entries, %d expired", sum.Duration.Round(time.Millisecond), sum.DeadLettered, fc.LogPeakEntries, fc.LogExpired)
			want := int64(0)
			for i := range int64(n) {
				if poison(i) {
					want++
				}
			}
			if tc.fanFails {
				// fan runs a poisoned input once per attempt: its tombstone
				// sends each replay to user code again.
				ran.mu.Lock()
				for i := range int64(n) {
					if w := map[bool]int{false: 1, true: attempts}[poison(i)]; ran.m[i] != w {
						t.Errorf("fan ran %d %d times, want %d", i, ran.m[i], w)
					}
				}
				ran.mu.Unlock()
			} else {
				ran.expect(t, "fan", n, 1)
			}
			if tc.counted {
				counted.expect(t, "counter", n, 1)
			}
			if sum.DeadLettered != want {
				t.Errorf("%d roots dead-lettered, want the %d poisoned ones", sum.DeadLettered, want)
			}
			seen.mu.Lock()
			for v := range int64(2 * n) {
				if !poison(v/2) && seen.m[v] == 0 {
					t.Errorf("value %d never reached the sink", v)
				}
			}
			seen.mu.Unlock()
			for _, name := range []string{"counter", "fan"} {
				if c := sum.Component(name); c.LogExpired != 0 {
					t.Errorf("%d of %s's log entries expired", c.LogExpired, name)
				}
			}
			if c := sum.Component("fan"); c.LogPeakEntries < 16 {
				t.Errorf("fan's log peaked at %d entries, never full: the test proves nothing", c.LogPeakEntries)
			}
		})
	}
}
