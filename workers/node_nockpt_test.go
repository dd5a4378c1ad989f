package workers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// noCheckpointsTopology reads numbers from a spout that cannot seek (no
// checkpoint could rewind it) through a shuffled pass into a sink that
// records every value it is given, as an external system would, and
// counts its tasks' Cleanups (where a sink without checkpoints commits).
func noCheckpointsTopology(t *testing.T, name string, n int64, sink *flowtest.Sink, cleaned *atomic.Int64) *topology.Topology {
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n, d: 3 * time.Second} }, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", func() topology.Bolt { return &cleanedBolt{Bolt: sink.Bolt(), cleaned: cleaned} }, 2).Input("pre", topology.Shuffle())
	return build(t, b)
}

// cleanedBolt counts the Cleanups of the bolt it wraps, which take a
// while, as a commit does.
type cleanedBolt struct {
	topology.Bolt
	cleaned *atomic.Int64
}

func (b *cleanedBolt) Cleanup() error {
	time.Sleep(300 * time.Millisecond)
	defer b.cleaned.Add(1)
	return b.Bolt.Cleanup()
}

// seen counts how often the sink was given each number.
func seen(t *testing.T, sink *flowtest.Sink) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, v := range sink.Values() {
		n, ok := v[0].(int64)
		if !ok {
			t.Fatalf("the sink got %T, want int64", v[0])
		}
		out[n]++
	}
	return out
}

// TestNodesRunWithoutCheckpoints: at-most-once topologies, and
// at-least-once ones submitted without checkpoints, run in cluster mode
// with spouts that cannot seek. A dead worker's slot moves within the
// generation whatever it holds (nothing could be restored): at-most-once
// loses at most what was in flight and never delivers twice; at-least-once
// loses the spout's worker, whose spout starts over on another worker, and
// delivers every number; or it loses the leader's worker, and the new
// leader moves its slot rather than starting every task over. A worker
// that joins gets no tasks (a handover would lose the running tasks'
// state), and a rebalance is refused.
func TestNodesRunWithoutCheckpoints(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		for _, tc := range []struct {
			name, guarantee string
			leader          bool // the leader's worker is lost, not the spout's
		}{
			{"at-most-once", "at-most-once", false},
			{"at-least-once", "at-least-once", false},
			{"at-least-once-leader", "at-least-once", true},
		} {
			g := tc.guarantee
			t.Run(tc.name, func(t *testing.T) {
				verifyNoLeaks(t)
				const n = 3000
				name := "nockpt-" + g[:7]
				sink := flowtest.NewSink()
				var cleaned atomic.Int64
				topo := func(map[string]string) (*topology.Topology, error) {
					return noCheckpointsTopology(t, name, n, sink, &cleaned), nil
				}
				nd := startNodesOn(t, c, name, topo)
				members := []string{"n1", "n2", "n3"}
				for _, m := range members {
					nd.start(m)
				}
				// Without checkpoints, a worker that joins after the
				// first generation gets no tasks.
				nd.awaitMembers(members...)
				ctx := context.Background()
				spec := cluster.Spec{Name: name, Guarantee: g, NoCheckpoints: g == "at-least-once"}
				if err := nd.reg.Submit(ctx, spec); err != nil {
					t.Fatal(err)
				}
				first := nd.awaitPlan(name, 0, members...)
				time.Sleep(time.Second) // records flow
				gen, _, err := nd.gens.Current(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				victim := victimOf(t, gen, topo, g)
				if tc.leader {
					victim = nd.leader(name)
				}
				spoutLost := victim == gen.Owner(gen.Assignment[0])
				nd.stop(victim)
				moved := nd.awaitMove(name, first, victim)
				t.Logf("%s stopped; its slot moved to %s", victim, moved.Moves[victim].To)

				// A worker joins: no new generation, no task for it.
				nd.start("n4")
				// A rebalance (nothing else would enforce it: the CLI
				// refuses it first) leaves the generation as it is.
				cur, rev, err := nd.reg.Get(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				cur.Parallelism = map[string]int{"pre": 2}
				if _, err := nd.reg.Update(ctx, cur, rev); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				now, _, err := nd.gens.Current(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if now.Number != first || slices.Contains(owners(now), "n4") {
					t.Fatalf("after a join and a rebalance without checkpoints: generation %d (%s) on %v, want %d without n4", now.Number, now.Reason, owners(now), first)
				}
				nd.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
				// Finished means committed: the sink tasks that ran to the
				// end had cleaned up before the state said so.
				if got := cleaned.Load(); got < 2 {
					t.Fatalf("the topology is finished and %d of its 2 sink tasks have cleaned up", got)
				}
				nd.stopAll()

				got := seen(t, sink)
				missing, twice := 0, 0
				for i := int64(0); i < n; i++ {
					switch k := got[i]; {
					case k == 0:
						missing++
					case k > 1:
						twice++
					}
				}
				t.Logf("%d of %d delivered, %d missing, %d more than once", len(got), n, missing, twice)
				if len(got) > n {
					t.Fatalf("the sink got %d distinct values, want at most %d", len(got), n)
				}
				if g == "at-least-once" {
					if missing > 0 {
						t.Fatalf("at-least-once without checkpoints lost %d numbers", missing)
					}
					if spoutLost && twice == 0 {
						t.Fatal("the spout's worker stopped and nothing came twice: the spout did not start over, so the test proves nothing")
					}
					return
				}
				if twice > 0 {
					t.Fatalf("at-most-once delivered %d numbers more than once", twice)
				}
				if missing > n/2 {
					t.Fatalf("at-most-once lost %d of %d numbers: more than a stateless worker's records in flight", missing, n)
				}
			})
		}
	})
}

// victimOf is the worker to stop: under at-least-once the spout's, whose
// spout must start over elsewhere; under at-most-once one that holds only
// stateless tasks.
func victimOf(t *testing.T, gen cluster.Generation, topo func(map[string]string) (*topology.Topology, error), g string) string {
	t.Helper()
	built, _ := topo(nil)
	cfg := workers.DefaultConfig()
	var err error
	if cfg.Guarantee, err = workers.ParseGuarantee(g); err != nil {
		t.Fatal(err)
	}
	tasks, err := workers.Tasks(built, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stateful := map[string]bool{}
	for _, tk := range tasks {
		if tk.Component == "numbers" && g == "at-least-once" {
			return gen.Assignment[tk.ID]
		}
		if tk.Stateful {
			stateful[gen.Assignment[tk.ID]] = true
		}
	}
	for _, m := range slices.Sorted(maps.Values(gen.Assignment)) {
		if !stateful[m] {
			return m
		}
	}
	t.Fatal(fmt.Sprintf("every worker holds stateful tasks in %v; rename the topology", gen.Assignment))
	return ""
}

// owners are the workers gen gives tasks to, moves included.
func owners(gen cluster.Generation) []string {
	var out []string
	for _, m := range gen.Assignment {
		if o := gen.Owner(m); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}
