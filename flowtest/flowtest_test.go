package flowtest_test

import (
	"context"
	"testing"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

type double struct{}

func (double) Prepare(topology.TaskContext) error { return nil }
func (double) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	n, err := in.Int(0)
	if err != nil {
		return err
	}
	out.Emit(topology.Values{2 * n})
	out.Emit(topology.Values{2*n + 1})
	return nil
}
func (double) Cleanup() error { return nil }

func build(t *testing.T, n int64, sink *flowtest.Sink) *topology.Topology {
	b := topology.NewBuilder("numbers")
	b.Spout("count", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i} }), 1).Outputs("n")
	b.BasicBolt("double", func() topology.BasicBolt { return double{} }, 3).Input("count", topology.Shuffle()).Outputs("n")
	b.Bolt("out", sink.Bolt, 2).Input("double", topology.Fields("n"))
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestSinkSeesEverythingUnderChaos(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	sink := flowtest.NewSink()
	sum, err := flowtest.Run(context.Background(), build(t, n, sink), flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   3,
		Chaos:     chaos.Config{Drop: 0.05, Dup: 0.02, Reorder: 0.1, Fail: 0.01, Seed: 3},
		Configure: func(c *workers.Config) { c.BatchSize = 64 },
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := int64(0); i < 2*n; i++ {
		if seen[i] == 0 {
			t.Fatalf("record %d never reached the sink (summary %+v)", i, sum)
		}
	}
	if sum.Chaos.FramesDropped == 0 || sum.Component("count").Replayed == 0 {
		t.Fatalf("chaos did nothing, so the test proves nothing: %+v", sum)
	}
}

func TestIDsAreStableAcrossReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 2000
	ids := func(c chaos.Config) map[int64]uint64 {
		sink := flowtest.NewSink()
		if _, err := flowtest.Run(context.Background(), build(t, n, sink), flowtest.Options{Guarantee: workers.AtLeastOnce, Chaos: c}); err != nil {
			t.Fatal(err)
		}
		m := map[int64]uint64{}
		for _, r := range sink.Records() {
			v := r.Values[0].(int64)
			if old, ok := m[v]; ok && old != r.ID {
				t.Fatalf("value %d arrived with IDs %x and %x", v, old, r.ID)
			}
			m[v] = r.ID
		}
		return m
	}
	clean := ids(chaos.Config{})
	chaotic := ids(chaos.Config{Drop: 0.1, Fail: 0.05, Seed: 11})
	for v, id := range clean {
		if chaotic[v] != id {
			t.Fatalf("value %d: ID %x without chaos, %x with replays", v, id, chaotic[v])
		}
	}
}
