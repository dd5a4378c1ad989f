package workers_test

// Topologies of several shapes, at-least-once with dedup, under frame loss,
// duplication and reordering, injected bolt failures and worker crashes,
// each checked against an oracle computed from the input: how often every
// stateful bolt's user code must run per value, and what its sink must
// receive exactly once.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// rough is the chaos of these tests: every kind of frame fault, the
// fraction fail of inputs failed in bolts, and a worker crash every 700 ms
// (only workers without spouts or stateful bolts are crashed before
// checkpoints exist; at most once, workers with spouts over rewindable
// sources too).
func rough(seed uint64, drop, fail float64) chaos.Config {
	return chaos.Config{Drop: drop, Dup: 0.02, Reorder: 0.1, Delay: time.Millisecond, DelayProb: 0.2, Fail: fail, CrashEvery: 700 * time.Millisecond, Seed: seed}
}

// runs counts how often a stateful bolt's user code ran, per value.
type runs struct {
	mu sync.Mutex
	m  map[int64]int
}

func newRuns() *runs { return &runs{m: map[int64]int{}} }

func (r *runs) add(n int64) {
	r.mu.Lock()
	r.m[n]++
	r.mu.Unlock()
}

// expect fails the test unless every value 0..n-1 ran exactly want times
// and nothing else ran.
func (r *runs) expect(t *testing.T, what string, n int64, want int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := int64(0); i < n; i++ {
		if r.m[i] != want {
			t.Fatalf("%s ran its user code %d times for %d, want %d", what, r.m[i], i, want)
		}
	}
	if len(r.m) != int(n) {
		t.Fatalf("%s ran for %d distinct values, want %d", what, len(r.m), n)
	}
}

// counter is a stateful bolt that records its runs and forwards its input.
type counter struct {
	out  topology.Collector
	runs *runs
}

func (c *counter) Prepare(_ topology.TaskContext, out topology.Collector) error {
	c.out = out
	return nil
}

func (c *counter) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	c.runs.add(n)
	c.out.Emit(in, topology.Values{n})
	c.out.Ack(in)
}

func (c *counter) Cleanup() error            { return nil }
func (c *counter) Snapshot() ([]byte, error) { return nil, nil }
func (c *counter) Restore([]byte) error      { return nil }

// fanOut emits k records per input: n*k .. n*k+k-1.
type fanOut struct {
	out topology.Collector
	k   int64
}

func (f *fanOut) Prepare(_ topology.TaskContext, out topology.Collector) error {
	f.out = out
	return nil
}

func (f *fanOut) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	for i := int64(0); i < f.k; i++ {
		f.out.Emit(in, topology.Values{n*f.k + i})
	}
	f.out.Ack(in)
}

func (f *fanOut) Cleanup() error { return nil }

// sinkCounts returns how often each value reached the sink.
func sinkCounts(s *flowtest.Sink) map[int64]int {
	m := map[int64]int{}
	for _, v := range s.Values() {
		m[v[0].(int64)]++
	}
	return m
}

// expectSink fails the test unless the sink got every value 0..n-1 exactly
// want times and nothing else.
func expectSink(t *testing.T, s *flowtest.Sink, n int64, want int) {
	t.Helper()
	got := sinkCounts(s)
	for i := int64(0); i < n; i++ {
		if got[i] != want {
			t.Fatalf("the sink received %d %d times, want %d", i, got[i], want)
		}
	}
	if len(got) != int(n) {
		t.Fatalf("the sink received %d distinct values, want %d", len(got), n)
	}
}

// expectSinkAll fails the test unless the sink got every value 0..n-1 at
// least once and nothing else (at-least-once without dedup at the sink).
func expectSinkAll(t *testing.T, s *flowtest.Sink, n int64) {
	t.Helper()
	got := sinkCounts(s)
	for i := int64(0); i < n; i++ {
		if got[i] == 0 {
			t.Fatalf("record %d never reached the sink", i)
		}
	}
	if len(got) != int(n) {
		t.Fatalf("the sink received %d distinct values, want %d", len(got), n)
	}
}

// runShape runs topo with c for about two seconds of paced input, and fails
// the test unless the faults really happened.
func runShape(t *testing.T, topo *topology.Topology, c chaos.Config) *workers.Summary {
	t.Helper()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   3,
		Chaos:     c,
		Timeout:   2 * time.Minute,
		Configure: func(cfg *workers.Config) {
			cfg.BatchSize = 64
			cfg.MaxAttempts = 0 // the oracle needs every record; none may be given up on
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records in %v; replayed %d; chaos %+v; resent %d; crashes %d, recoveries %v",
		sum.Records, sum.Duration.Round(time.Millisecond), sum.Component("numbers").Replayed, sum.Chaos, sum.Resent, sum.Crashes, sum.Recoveries)
	if c.Drop > 0 && (sum.Chaos.FramesDropped == 0 || sum.Resent == 0) {
		t.Fatalf("no frame was dropped (%d) or resent (%d); the test proves nothing", sum.Chaos.FramesDropped, sum.Resent)
	}
	if sum.Chaos.InputsFailed == 0 || sum.Component("numbers").Replayed == 0 {
		t.Fatalf("no input failed (%d) or nothing replayed (%d); the test proves nothing", sum.Chaos.InputsFailed, sum.Component("numbers").Replayed)
	}
	if c.CrashEvery > 0 && sum.Crashes == 0 {
		t.Fatal("no worker crashed; the test proves nothing")
	}
	return sum
}

// paced is a numbers spout that spreads n records over d.
func paced(n int64, d time.Duration) func() topology.Spout {
	return func() topology.Spout { return &numbers{n: n, d: d} }
}

func build(t *testing.T, b *topology.Builder) *topology.Topology {
	t.Helper()
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestAllGroupingIntoStatefulTallyIsExact: every task of an All-grouped
// bolt forwards its own copy, so a stateful bolt behind it must count every
// value once per task.
func TestAllGroupingIntoStatefulTallyIsExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("all-tally")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("copy", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.All()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("copy", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("tally", topology.Global())
	runShape(t, build(t, b), rough(21, 0.05, 0.01))
	tally.expect(t, "tally", n, 3)
	expectSink(t, sink, n, 3)
}

// TestDiamondIntoStatefulJoinIsExact: two paths from one spout meet in one
// stateful bolt, which must see every value once per path.
func TestDiamondIntoStatefulJoinIsExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	join, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("diamond")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("left", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("right", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.LocalOrShuffle()).Outputs("n")
	b.Bolt("join", func() topology.Bolt { return &counter{runs: join} }, 2).
		Input("left", topology.Fields("n")).Input("right", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("join", topology.Global())
	runShape(t, build(t, b), rough(22, 0.05, 0.01))
	join.expect(t, "join", n, 2)
	expectSink(t, sink, n, 2)
}

// TestStatefulBoltBehindShuffleRunsOncePerInput: shuffle picks the task
// from the record ID, so a replay reaches the task that saw the original
// and dedup there keeps user code from running twice.
func TestStatefulBoltBehindShuffleRunsOncePerInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("behind-shuffle")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 3).Input("pre", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("tally", topology.Global())
	sum := runShape(t, build(t, b), rough(23, 0.05, 0.01))
	tally.expect(t, "tally", n, 1)
	expectSink(t, sink, n, 1)
	if sum.Component("tally").DuplicatesDropped == 0 {
		t.Fatal("tally dropped no duplicate; the test proves nothing")
	}
}

// TestFiftyWayFanOutIsExact: one input, fifty children, each counted once
// by a stateful bolt, under 1% frame loss.
func TestFiftyWayFanOutIsExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, k = 400, 50
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("fan-out")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: k} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 3).Input("fan", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 2).Input("tally", topology.Shuffle())
	// A tree has about 150 inputs, so a low fail rate still fails one
	// attempt in seven.
	runShape(t, build(t, b), rough(24, 0.01, 0.001))
	tally.expect(t, "tally", n*k, 1)
	expectSink(t, sink, n*k, 1)
}

// partial is a stateful bolt that emits four records per input. The first
// time it sees one input in ten, it emits two of them and fails the input:
// the replay must run it again, and the two outputs it emits again must be
// dropped as duplicates downstream.
type partial struct {
	out    topology.Collector
	mu     *sync.Mutex
	failed map[int64]bool
}

func (p *partial) Prepare(_ topology.TaskContext, out topology.Collector) error {
	p.out = out
	return nil
}

func (p *partial) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	p.mu.Lock()
	fail := n%10 == 3 && !p.failed[n]
	if fail {
		p.failed[n] = true
	}
	p.mu.Unlock()
	for i := int64(0); i < 4; i++ {
		if fail && i == 2 {
			p.out.FailWith(in, fmt.Errorf("partial: failing %d after two of its outputs", n))
			return
		}
		p.out.Emit(in, topology.Values{4*n + i})
	}
	p.out.Ack(in)
}

func (p *partial) Cleanup() error            { return nil }
func (p *partial) Snapshot() ([]byte, error) { return nil, nil }
func (p *partial) Restore([]byte) error      { return nil }

func TestStatefulBoltFailingAfterPartialEmitLosesNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	var mu sync.Mutex
	failed := map[int64]bool{}
	sink := flowtest.NewSink()
	b := topology.NewBuilder("partial")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("partial", func() topology.Bolt { return &partial{mu: &mu, failed: failed} }, 2).Input("pre", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 2).Input("partial", topology.Fields("n"))
	sum := runShape(t, build(t, b), rough(25, 0.05, 0.01))
	expectSink(t, sink, 4*n, 1)
	if len(failed) != n/10 {
		t.Fatalf("partial failed %d inputs, want %d", len(failed), n/10)
	}
	if c := sum.Component("partial"); c.ReExecuted < int64(n/10) {
		t.Fatalf("partial re-executed %d failed inputs, want at least %d", c.ReExecuted, n/10)
	}
	if sum.Component("sink").DuplicatesDropped == 0 {
		t.Fatal("the sink dropped no duplicate of a partial emit; the test proves nothing")
	}
}

// holder is a stateful bolt that holds its inputs and emits and acks them
// on its tick, as a windowing bolt does.
type holder struct {
	out  topology.Collector
	runs *runs
	held []*topology.Tuple
}

func (h *holder) Prepare(_ topology.TaskContext, out topology.Collector) error {
	h.out = out
	return nil
}

func (h *holder) Execute(in *topology.Tuple) {
	if in.Stream == topology.TickStream {
		for _, t := range h.held {
			n, _ := t.Int(0)
			h.out.Emit(t, topology.Values{n})
			h.out.Ack(t)
		}
		h.held = h.held[:0]
		return
	}
	n, _ := in.Int(0)
	h.runs.add(n)
	h.held = append(h.held, in)
}

func (h *holder) Cleanup() error            { return nil }
func (h *holder) Snapshot() ([]byte, error) { return nil, nil }
func (h *holder) Restore([]byte) error      { return nil }

// TestHeldInputsParkTheirReplays: a replay that reaches a stateful bolt
// while it still holds the original is not a duplicate yet (only a
// completed input is); it waits, and once the original is acked it is one:
// user code runs once and the output reaches the sink once.
func TestHeldInputsParkTheirReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	held, sink := newRuns(), flowtest.NewSink()
	other := flowtest.NewSink().FailFirst(0.3) // fails trees while holder holds their records
	b := topology.NewBuilder("held")
	b.Spout("numbers", paced(n, time.Second), 1).Outputs("n")
	b.Bolt("holder", func() topology.Bolt { return &holder{runs: held} }, 2).Input("numbers", topology.Fields("n")).Outputs("n").Tick(50 * time.Millisecond)
	b.Bolt("other", other.Bolt, 1).Input("numbers", topology.Shuffle())
	b.Bolt("sink", sink.StatefulBolt, 1).Input("holder", topology.Global())
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{Guarantee: workers.AtLeastOnce, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	held.expect(t, "holder", n, 1)
	expectSink(t, sink, n, 1)
	if h := sum.Component("holder"); h.Parked == 0 || h.DuplicatesDropped == 0 {
		t.Fatalf("holder parked %d replays and dropped %d duplicates; the test proves nothing", h.Parked, h.DuplicatesDropped)
	}
}

// TestShapesWithRecycledFrames runs a diamond, an All grouping and a
// fan-out side by side with inputs failed in bolts but no frame chaos,
// which is when the record arrays of frames are recycled (recordSlabs):
// a replay, a re-emit from the output log or a tuple kept past its frame
// must never read an array that went back to the pool.
func TestShapesWithRecycledFrames(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, k = 3000, 3
	join, tally, fanned := newRuns(), newRuns(), newRuns()
	b := topology.NewBuilder("recycled")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("left", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("right", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.LocalOrShuffle()).Outputs("n")
	b.Bolt("join", func() topology.Bolt { return &counter{runs: join} }, 2).
		Input("left", topology.Fields("n")).Input("right", topology.Shuffle()).Outputs("n")
	b.Bolt("copy", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.All()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("copy", topology.Fields("n")).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: k} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("fanned", func() topology.Bolt { return &counter{runs: fanned} }, 2).Input("fan", topology.Fields("n")).Outputs("n")
	c := chaos.Config{Fail: 0.01, Seed: 25}
	if c.Enabled() {
		t.Fatal("frame chaos turns recycling off; the test would prove nothing")
	}
	runShape(t, build(t, b), c)
	join.expect(t, "join", n, 2)
	tally.expect(t, "tally", n, 2)
	fanned.expect(t, "fanned", n*k, 1)
}

// TestSeveralSpoutsAndAckersBesideThemAreExact: two spouts on different
// workers and three ackers, which placement puts beside the spouts (each
// spout's trees then go to an acker of its own worker), under frame loss,
// duplication, reordering and failed inputs: a stateful bolt still runs
// once per value and its sink gets each value once.
func TestSeveralSpoutsAndAckersBesideThemAreExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 2000
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("two-spouts")
	b.Spout("low", func() topology.Spout { return &numbers{n: n, d: 2 * time.Second} }, 1).Outputs("n")
	b.Spout("high", func() topology.Spout { return &numbers{n: n, d: 2 * time.Second, base: n} }, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("low", topology.Shuffle()).Input("high", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("pre", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("tally", topology.Global())
	c := rough(25, 0.05, 0.01)
	c.CrashEvery = 0 // crash chaos without checkpoints keeps the ackers off the spouts' worker
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
		Guarantee: workers.AtLeastOnce, Workers: 3, Chaos: c, Timeout: 2 * time.Minute,
		Configure: func(cfg *workers.Config) {
			cfg.BatchSize, cfg.MaxAttempts, cfg.Ackers = 64, 0, 3
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("placement %s; chaos %+v; resent %d", sum.Placement, sum.Chaos, sum.Resent)
	for _, want := range []string{"worker 0: low[0]", "worker 1: high[0]"} {
		if !strings.Contains(sum.Placement, want) {
			t.Fatalf("placement %q: want %q", sum.Placement, want)
		}
	}
	workerOf := func(task string) string {
		for _, w := range strings.Split(sum.Placement, "; ") {
			if strings.Contains(w+" ", " "+task+" ") {
				return strings.SplitN(w, ":", 2)[0]
			}
		}
		t.Fatalf("%s is not in the placement %q", task, sum.Placement)
		return ""
	}
	for i, spout := range []string{"low[0]", "high[0]", "low[0]"} {
		if a := fmt.Sprintf("__acker[%d]", i); workerOf(a) != workerOf(spout) {
			t.Fatalf("%s is on %s, its spout %s on %s", a, workerOf(a), spout, workerOf(spout))
		}
	}
	if sum.Chaos.FramesDropped == 0 || sum.Chaos.InputsFailed == 0 || sum.Component("low").Replayed+sum.Component("high").Replayed == 0 {
		t.Fatalf("chaos %+v, replayed %d and %d: the test proves nothing", sum.Chaos, sum.Component("low").Replayed, sum.Component("high").Replayed)
	}
	tally.expect(t, "tally", 2*n, 1)
	expectSink(t, sink, 2*n, 1)
}
