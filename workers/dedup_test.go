package workers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// tally is a stateful bolt: it records how often its user code ran for each
// value, and forwards the value anchored.
type tally struct {
	out  topology.Collector
	mu   *sync.Mutex
	runs map[int64]int
}

func (t *tally) Prepare(_ topology.TaskContext, out topology.Collector) error {
	t.out = out
	return nil
}

func (t *tally) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	t.mu.Lock()
	t.runs[n]++
	t.mu.Unlock()
	t.out.Emit(in, topology.Values{n})
	t.out.Ack(in)
}

func (t *tally) Cleanup() error            { return nil }
func (t *tally) Snapshot() ([]byte, error) { return nil, nil }
func (t *tally) Restore(snap []byte) error { return nil }

// tallyTopology is numbers -> tally (p tasks, grouped by g) -> sink. It
// returns the topology and the map of how often tally's user code ran per
// value.
func tallyTopology(t *testing.T, name string, n int64, p int, g topology.Grouping, sink *flowtest.Sink) (*topology.Topology, map[int64]int) {
	t.Helper()
	mu := &sync.Mutex{}
	runs := map[int64]int{}
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n} }, 1).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &tally{mu: mu, runs: runs} }, p).Input("numbers", g).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("tally", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo, runs
}

// TestReplayPropagatesThroughLoggedOutputs loses records between a stateful
// bolt and its downstream bolt only. The replays that follow reach the
// stateful bolt again: it must not run its user code twice, yet the records
// it re-emits from its log must reach the sink.
func TestReplayPropagatesThroughLoggedOutputs(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	sink := flowtest.NewSink()
	topo, runs := tallyTopology(t, "propagation", n, 2, topology.Fields("n"), sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   2,
		Chaos:     chaos.Config{Drop: 0.2, Seed: 4},
		Configure: func(c *workers.Config) {
			c.ChaosComponents = []string{"tally"} // only tally -> sink frames are lost
			c.BatchSize = 32
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < n; i++ {
		if runs[i] != 1 {
			t.Fatalf("tally ran its user code %d times for %d", runs[i], i)
		}
	}
	seen := map[int64]bool{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)] = true
	}
	for i := int64(0); i < n; i++ {
		if !seen[i] {
			t.Fatalf("%d never reached the sink", i)
		}
	}
	tc := sum.Component("tally")
	if sum.Chaos.RecordsDropped == 0 || tc.DuplicatesDropped == 0 || tc.ReEmitted == 0 {
		t.Fatalf("the test proves nothing: dropped %d, duplicates %d, re-emitted %d", sum.Chaos.RecordsDropped, tc.DuplicatesDropped, tc.ReEmitted)
	}
	t.Logf("dropped %d records; tally dropped %d duplicates and re-emitted %d outputs", sum.Chaos.RecordsDropped, tc.DuplicatesDropped, tc.ReEmitted)
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
		for name, g := range groupings {
			stream := topology.DefaultStream
			if name == "direct" {
				stream = "direct"
			}
			b.Bolt(name, func() topology.Bolt { return &pass{} }, 3).InputStream("numbers", stream, g).Outputs("n")
			sinks[name] = flowtest.NewSink()
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
				key := fmt.Sprintf("%s/%d", name, r.Values[0].(int64))
				if old, ok := ids[key]; ok && old != r.ID {
					t.Fatalf("%s arrived with two IDs %x and %x", key, old, r.ID)
				}
				ids[key] = r.ID
			}
		}
		return ids, replayed
	}
	clean, _ := run(chaos.Config{})
	// Each tree spans a dozen frames; a light drop rate still fails most of
	// them once, so most records arrive in a replay.
	chaotic, replayed := run(chaos.Config{Drop: 0.03, Dup: 0.03, Reorder: 0.1, Seed: 9})
	if replayed == 0 {
		t.Fatal("nothing was replayed; the test proves nothing")
	}
	if len(clean) != 6*1000 {
		t.Fatalf("clean run delivered %d distinct records, want %d", len(clean), 6*1000)
	}
	for k, id := range clean {
		if chaotic[k] != id {
			t.Fatalf("%s: ID %x in the clean run, %x with replays", k, id, chaotic[k])
		}
	}
}

// directNumbers also emits each number to task n%3 of the direct subscriber.
type directNumbers struct{ numbers }

func (d *directNumbers) Next(ctx context.Context) error {
	for i := 0; i < 50; i++ {
		if d.next >= d.n {
			return topology.ErrExhausted
		}
		id := topology.MsgID{Offset: d.next}
		d.out.Emit(id, topology.Values{d.next})
		d.out.EmitDirect(int(d.next%3), "direct", topology.MsgID{Partition: 1, Offset: d.next}, topology.Values{d.next})
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
	topo, runs := tallyTopology(t, "pushback", n, 1, topology.Shuffle(), sink)
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
	for i := int64(0); i < n; i++ {
		if runs[i] != 1 {
			t.Fatalf("tally ran %d times for %d", runs[i], i)
		}
	}
}
