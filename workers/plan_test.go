package workers

import (
	"slices"
	"testing"

	"github.com/ackflow/ackflow/topology"
)

// statefulProbe is a stateful bolt for plans that are never run.
type statefulProbe struct{ topology.Bolt }

func (statefulProbe) Snapshot() ([]byte, error) { return nil, nil }
func (statefulProbe) Restore([]byte) error      { return nil }

// TestHoldersBelowASpout: a dead-lettered root's trees are abandoned to
// the tasks that keep output logs downstream of its spout only. Spout a
// feeds a stateful bolt that feeds a stateful join; spout b reaches the
// join through a stateless bolt; spout c feeds only stateless bolts.
func TestHoldersBelowASpout(t *testing.T) {
	b := topology.NewBuilder("below")
	stateless := func() topology.Bolt { return nil }
	stateful := func() topology.Bolt { return statefulProbe{} }
	for _, s := range []string{"a", "b", "c"} {
		b.Spout(s, func() topology.Spout { return nil }, 1).Outputs("n")
	}
	b.Bolt("fa", stateful, 2).Input("a", topology.Shuffle()).Outputs("n")
	b.Bolt("pb", stateless, 2).Input("b", topology.Shuffle()).Outputs("n")
	b.Bolt("join", stateful, 3).Input("fa", topology.Shuffle()).Input("pb", topology.Shuffle())
	b.Bolt("pc", stateless, 1).Input("c", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlan(topo, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tasks := func(comps ...string) []int {
		var ts []int
		for _, c := range comps {
			ts = append(ts, p.compTasks[c]...)
		}
		slices.Sort(ts)
		return ts
	}
	sorted := func(ts []int) []int { return slices.Sorted(slices.Values(ts)) }
	if got, want := sorted(p.holders), tasks("fa", "join"); !slices.Equal(got, want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	for spout, want := range map[string][]int{"a": tasks("fa", "join"), "b": tasks("join"), "c": nil} {
		if got := sorted(p.holdersBelow(p.compTasks[spout][0])); !slices.Equal(got, want) {
			t.Errorf("holders below spout %s: %v, want %v", spout, got, want)
		}
	}
	if got := sorted(p.holdersBelow(p.ackers[0])); !slices.Equal(got, sorted(p.holders)) {
		t.Errorf("holders below an acker task: %v, want every holder", got)
	}
}
