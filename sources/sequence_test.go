package sources_test

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

func TestSequenceEmitsEachPositionOnceAcrossTasks(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	sink := flowtest.NewSink()
	b := topology.NewBuilder("sequence")
	b.Spout("seq", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i} }), 3).Outputs("i")
	b.Bolt("sink", sink.Bolt, 2).Input("seq", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Chaos: chaos.Config{Drop: 0.05, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := int64(0); i < n; i++ {
		if seen[i] == 0 {
			t.Fatalf("position %d never arrived", i)
		}
	}
	if sum.Component("seq").Emitted != n {
		t.Fatalf("the spouts emitted %d records, want %d", sum.Component("seq").Emitted, n)
	}
}
