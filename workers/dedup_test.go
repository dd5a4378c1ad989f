package workers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// tallyTopology is numbers -> tally (a counter with p tasks, grouped by g)
// -> sink. It returns the topology and how often tally's user code ran per
// value.
func tallyTopology(t *testing.T, name string, n int64, p int, g topology.Grouping, sink *flowtest.Sink) (*topology.Topology, *runs) {
	t.Helper()
	tally := newRuns()
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n} }, 1).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, p).Input("numbers", g).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("tally", topology.Shuffle())
	return build(t, b), tally
}

// TestReplayPropagatesThroughLoggedOutputs fails records between a stateful
// bolt and its downstream bolt only: the sink fails a fifth of the first
// deliveries. The replays that follow reach the stateful bolt again: it
// must not run its user code twice, yet the records it re-emits from its
// log must reach the sink.
func TestReplayPropagatesThroughLoggedOutputs(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	sink := flowtest.NewSink().FailFirst(0.2)
	topo, tally := tallyTopology(t, "propagation", n, 2, topology.Fields("n"), sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   2,
		Configure: func(c *workers.Config) { c.BatchSize = 32 },
	})
	if err != nil {
		t.Fatal(err)
	}
	tally.expect(t, "tally", n, 1)
	exactlyOnceEach(t, sink, n)
	tc := sum.Component("tally")
	if sink.Failures() == 0 || tc.DuplicatesDropped == 0 || tc.ReEmitted == 0 {
		t.Fatalf("the test proves nothing: failed %d, duplicates %d, re-emitted %d", sink.Failures(), tc.DuplicatesDropped, tc.ReEmitted)
	}
	t.Logf("the sink failed %d deliveries; tally dropped %d duplicates and re-emitted %d outputs", sink.Failures(), tc.DuplicatesDropped, tc.ReEmitted)
}

func TestCleanRunLeavesLogsEmpty(t *testing.T) {
	defer goleak.VerifyNone(t)
	sink := flowtest.NewSink()
	topo, _ := tallyTopology(t, "clean", 20000, 2, topology.Shuffle(), sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Component("tally").LogPeakEntries == 0 {
		t.Fatal("the stateful bolt logged nothing")
	}
	if sum.LogEntries != 0 {
		t.Fatalf("%d log entries left after a clean run", sum.LogEntries)
	}
}

// TestIDsAreDeterministicForEveryGrouping runs a topology with every
// grouping twice, once clean and once with replays, and checks that every
// record that reached a sink carries the same ID in both runs.
func TestIDsAreDeterministicForEveryGrouping(t *testing.T) {
	defer goleak.VerifyNone(t)
	groupings := map[string]topology.Grouping{
		"shuffle": topology.Shuffle(), "fields": topology.Fields("n"), "all": topology.All(),
		"global": topology.Global(), "local": topology.LocalOrShuffle(), "direct": topology.Direct(),
	}
	run := func(c chaos.Config) (map[string]uint64, int64) {
		sinks := map[string]*flowtest.Sink{}
		b := topology.NewBuilder("groupings")
		b.Spout("numbers", func() topology.Spout { return &directNumbers{numbers: numbers{n: 1000}} }, 1).Outputs("n").Stream("direct", "n")
		// In a fixed order, so that task IDs are the same in both runs.
		names := slices.Sorted(maps.Keys(groupings))
		for _, name := range names {
			g := groupings[name]
			stream := topology.DefaultStream
			if name == "direct" {
				stream = "direct"
			}
			b.Bolt(name, func() topology.Bolt { return &pass{} }, 3).InputStream("numbers", stream, g).Outputs("n")
			sinks[name] = flowtest.NewSink().FailFirst(0.3)
			b.Bolt(name+"-sink", sinks[name].Bolt, 1).Input(name, topology.Global())
		}
		topo, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Workers: 3, Chaos: c, MessageTimeout: 500 * time.Millisecond, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%v: %+v", err, sum)
		}
		ids := map[string]uint64{}
		replayed := sum.Component("numbers").Replayed
		for name, s := range sinks {
			for _, r := range s.Records() {
				// Each task of "all" emits its own copy, a record of its own.
				key := fmt.Sprintf("%s/%d/%d", name, r.Values[0].(int64), r.Task)
				if old, ok := ids[key]; ok && old != r.ID {
					t.Fatalf("%s arrived with two IDs %x and %x", key, old, r.ID)
				}
				ids[key] = r.ID
			}
		}
		return ids, replayed
	}
	// Both runs replay the roots whose first delivery a sink failed; the
	// second also loses, duplicates and reorders frames.
	clean, replayed := run(chaos.Config{})
	chaotic, _ := run(chaos.Config{Drop: 0.03, Dup: 0.03, Reorder: 0.1, Seed: 9})
	if replayed == 0 {
		t.Fatal("nothing was replayed; the test proves nothing")
	}
	if want := 8 * 1000; len(clean) != want {
		t.Fatalf("clean run delivered %d distinct records, want %d (all grouping: one per task)", len(clean), want)
	}
	for k, id := range clean {
		if chaotic[k] != id {
			t.Fatalf("%s: ID %x in the clean run, %x with replays", k, id, chaotic[k])
		}
	}
}

// directNumbers also emits each number to task n%3 of the direct subscriber.
type directNumbers struct {
	numbers
	direct []int // the direct subscriber's task IDs
}

func (d *directNumbers) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	d.direct = tc.TasksOf("direct")
	return d.numbers.Open(tc, out)
}

func (d *directNumbers) Next(ctx context.Context) error {
	for i := 0; i < 50; i++ {
		if d.next >= d.n {
			return topology.ErrExhausted
		}
		id := topology.MsgID{Offset: d.next}
		d.out.Emit(id, topology.Values{d.next})
		d.out.EmitDirect(d.direct[d.next%3], "direct", topology.MsgID{Partition: 1, Offset: d.next}, topology.Values{d.next})
		d.next++
	}
	return nil
}

// TestFullLogPushesBackOnSpouts gives the stateful bolt a log far smaller
// than what the spout may have in flight: the run must pause the spout
// instead of growing the log or losing records, and still end exactly.
func TestFullLogPushesBackOnSpouts(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 20000
	sink := flowtest.NewSink()
	topo, tally := tallyTopology(t, "pushback", n, 1, topology.Shuffle(), sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) { c.Log.MaxEntries = 100 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.BackpressureSignals == 0 {
		t.Fatal("the log filled up but the spouts were never told to pause")
	}
	exactlyOnceEach(t, sink, n)
	tally.expect(t, "tally", n, 1)
}
