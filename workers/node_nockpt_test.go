package workers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
)

// branch is one path of noCheckpointsTopology: the sink at its end, the
// values it should get (0..size-1) and how often each.
type branch struct {
	name string
	sink *flowtest.Sink
	size int64
	want int
}

// noCheckpointsTopology reads numbers from a spout that cannot seek (no
// checkpoint could rewind it) into four stateless shapes, each ending in
// a sink that records every value it is given, as an external system
// would: a shuffled pass (each number once), an All grouping over two
// copies (twice), a fan-out of three, and a bolt that fails one input in
// ten after two of its four outputs, the first time. The sinks count
// their tasks' Cleanups (where a sink without checkpoints commits).
func noCheckpointsTopology(t *testing.T, name string, n int64, branches []branch, failed map[int64]bool, mu *sync.Mutex, cleaned *atomic.Int64) *topology.Topology {
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n, d: 3 * time.Second} }, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("copy", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.All()).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: 3} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("half", func() topology.Bolt { return &statelessPartial{partial{mu: mu, failed: failed}} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	for i, from := range []string{"pre", "copy", "fan", "half"} {
		sink := branches[i].sink
		b.Bolt(branches[i].name, func() topology.Bolt { return &cleanedBolt{Bolt: sink.Bolt(), cleaned: cleaned} }, 1).Input(from, topology.Shuffle())
	}
	return build(t, b)
}

// tally compares what br's sink got with what it should: how many
// expected values it got fewer times than want, more times, and values it
// should never have got.
func (br branch) tally() (short, over, foreign int) {
	got := sinkCounts(br.sink)
	for v, k := range got {
		switch {
		case v < 0 || v >= br.size:
			foreign++
		case k > br.want:
			over++
		}
	}
	for v := range br.size {
		if got[v] < br.want {
			short++
		}
	}
	return short, over, foreign
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

// TestNodesRunWithoutCheckpoints: at-most-once topologies, and
// at-least-once ones submitted without checkpoints, run in cluster mode
// with spouts that cannot seek. A dead worker's slot moves within the
// generation whatever it holds (nothing could be restored). The oracle is
// each shape's multiplicity: at-most-once loses at most what was in flight
// and never delivers more often than the shape says; at-least-once loses
// the spout's worker, whose spout starts over on another worker, and
// delivers every value at least that often; or it loses the leader's worker, and the new
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
				branches := []branch{{"direct", flowtest.NewSink(), n, 1}, {"all", flowtest.NewSink(), n, 2},
					{"fanned", flowtest.NewSink(), 3 * n, 1}, {"quartered", flowtest.NewSink(), 4 * n, 1}}
				var mu sync.Mutex
				failed := map[int64]bool{}
				var cleaned atomic.Int64
				topo := func(map[string]string) (*topology.Topology, error) {
					return noCheckpointsTopology(t, name, n, branches, failed, &mu, &cleaned), nil
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
				if got := cleaned.Load(); got < int64(len(branches)) {
					t.Fatalf("the topology is finished and %d of its %d sink tasks have cleaned up", got, len(branches))
				}
				nd.stopAll()

				mu.Lock()
				if len(failed) != n/10 {
					t.Fatalf("half failed %d inputs, want %d", len(failed), n/10)
				}
				mu.Unlock()
				var short, over int
				for _, br := range branches {
					s, o, foreign := br.tally()
					t.Logf("%s: %d of %d values short of %d, %d over", br.name, s, br.size, br.want, o)
					if foreign > 0 {
						t.Fatalf("%s got %d values no input makes", br.name, foreign)
					}
					short, over = short+s, over+o
				}
				if g == "at-least-once" {
					if short > 0 {
						t.Fatalf("at-least-once without checkpoints lost %d values", short)
					}
					if spoutLost && over == 0 {
						t.Fatal("the spout's worker stopped and nothing came twice: the spout did not start over, so the test proves nothing")
					}
					return
				}
				if over > 0 {
					t.Fatalf("at-most-once delivered %d values more often than the shape says", over)
				}
				if short > int(10*n)/2 {
					t.Fatalf("at-most-once lost %d of %d values: more than a stateless worker's records in flight", short, 10*n)
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
	t.Fatalf("every worker holds stateful tasks in %v; rename the topology", gen.Assignment)
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

// TestLeaderTakesOverAFinishingTopology: a leader writes the state
// finishing before it ends the generation of a topology without
// checkpoints. When it dies right after, the next leader ends the
// generation it adopts (the surviving members stop gracefully, their
// sinks clean up) and writes finished, rather than wait for tasks that
// have stopped; crash chaos in an in-process cluster found runs that never
// ended without this.
func TestLeaderTakesOverAFinishingTopology(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		// The test writes finishing for the leader and then stops it; in
		// about one run in thirty the leader saw the write and finished the
		// topology itself before it stopped, and the takeover never
		// happened. Such a try is told apart (every sink cleaned up, the
		// stopped leader's too) and made again on a fresh cluster.
		for try := 1; ; try++ {
			if finishingTakeover(t, c, fmt.Sprintf("finishing-%d", try)) {
				return
			}
			if try == 3 {
				t.Fatal("in three tries the leader always finished the topology itself before it stopped")
			}
		}
	})
}

// finishingTakeover runs one try of TestLeaderTakesOverAFinishingTopology;
// it returns false if the leader finished the topology itself before the
// test stopped it.
func finishingTakeover(t *testing.T, c coordination, name string) bool {
	var cleaned atomic.Int64
	sink := flowtest.NewSink()
	topo := func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout { return &numbers{n: 1 << 20, d: time.Minute} }, 1).Outputs("n")
		b.Bolt("pre", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("sink", func() topology.Bolt { return &cleanedBolt{Bolt: sink.Bolt(), cleaned: &cleaned} }, 3).Input("pre", topology.Shuffle())
		return build(t, b), nil
	}
	nd := startNodesOn(t, c, name, topo)
	nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-least-once", NoCheckpoints: true})
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); len(sink.Values()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no record reached the sink in 20 s")
		}
	}
	leader := nd.leader(name)
	gen, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	built, _ := topo(nil)
	cfg := workers.DefaultConfig()
	refs, err := workers.Tasks(built, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var surviving, sinks int64 // sink tasks on the workers that stay, and in all
	for _, r := range refs {
		if r.Component == "sink" {
			sinks++
			if gen.Owner(gen.Assignment[r.ID]) != leader {
				surviving++
			}
		}
	}
	spec, rev, err := nd.reg.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// What the leader writes before it ends the generation, then its
	// death (as far as its tasks go: they stop without Cleanup).
	spec.State = cluster.StateFinishing
	if _, err := nd.reg.Update(ctx, spec, rev); err != nil {
		t.Fatal(err)
	}
	nd.stop(leader)
	start := time.Now()
	nd.await(20*time.Second, func(s string) bool { return s == cluster.StateFinished })
	if next := nd.leader(name); next == leader {
		t.Fatalf("%s still leads after it stopped", leader)
	}
	// The sink tasks on the two live workers cleaned up before the
	// state said finished; the stopped worker's did not.
	got := cleaned.Load()
	if got == sinks && sinks != surviving {
		t.Logf("%s: the leader %s finished the topology before it stopped (all %d sink tasks cleaned up); trying again", name, leader, got)
		return false
	}
	if got != surviving {
		t.Fatalf("%d sink tasks cleaned up; %d ran on the workers that stayed", got, surviving)
	}
	t.Logf("finished %v after the leader %s died while finishing; %d sink tasks cleaned up", time.Since(start).Round(time.Millisecond), leader, got)
	return true
}

// TestLeaderPlacesTasksByThePlacementPolicy: a leader places a new
// generation as the nodes' Place says, and by rendezvous hashing when
// Place leaves a task out.
func TestLeaderPlacesTasksByThePlacementPolicy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		place func(tasks []workers.TaskRef, names []string) map[int]string
		check func(gen cluster.Generation) error
	}{
		{"every task on the last worker", func(tasks []workers.TaskRef, names []string) map[int]string {
			out := map[int]string{}
			for _, t := range tasks {
				out[t.ID] = names[len(names)-1]
			}
			return out
		}, func(gen cluster.Generation) error {
			for id, m := range gen.Assignment {
				if gen.Owner(m) != "n3" {
					return fmt.Errorf("task %d runs on %s", id, gen.Owner(m))
				}
			}
			return nil
		}},
		{"a task left out", func(tasks []workers.TaskRef, names []string) map[int]string {
			return map[int]string{tasks[0].ID: names[0]}
		}, func(gen cluster.Generation) error {
			ids := make([]int, 0, len(gen.Assignment))
			for id := range gen.Assignment {
				ids = append(ids, id)
			}
			if want := cluster.Assign(gen.Topology, ids, []string{"n1", "n2", "n3"}); !maps.Equal(gen.Assignment, want) {
				return fmt.Errorf("placed %v, rendezvous hashing places %v", gen.Assignment, want)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			const name = "placed"
			nd := startNodesOn(t, inMemory, name, func(map[string]string) (*topology.Topology, error) {
				b := topology.NewBuilder(name)
				b.Spout("numbers", func() topology.Spout { return &numbers{n: 1000, d: 5 * time.Second} }, 1).Outputs("n")
				b.Bolt("pre", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.Shuffle()).Outputs("n")
				b.Bolt("sink", flowtest.NewSink().Bolt, 2).Input("pre", topology.Shuffle())
				return build(t, b), nil
			})
			nd.place = tc.place
			nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-least-once", NoCheckpoints: true})
			ctx := context.Background()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				gen, _, err := nd.gens.Current(ctx, name)
				if err == nil {
					if err := tc.check(gen); err != nil {
						t.Fatal(err)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("no generation after 10 s: %v", err)
				}
			}
		})
	}
}

// submitOnThree starts the nodes n1, n2 and n3, waits until they are
// members, and submits spec.
func (n *nodes) submitOnThree(spec cluster.Spec) {
	n.t.Helper()
	n.submitOn(spec, "n1", "n2", "n3")
}

// submitOn starts the nodes members, waits until they are members, and
// submits spec.
func (n *nodes) submitOn(spec cluster.Spec, members ...string) {
	n.t.Helper()
	for _, m := range members {
		n.start(m)
	}
	n.awaitMembers(members...)
	if err := n.reg.Submit(context.Background(), spec); err != nil {
		n.t.Fatal(err)
	}
}

// rewindableShapes reads a rewindable spout of n numbers, read over d,
// into three branches of stateless bolts, each ending in its sink: a
// shuffled pass (each number once), an All grouping over two copies
// (twice) and a fan-out of three (values 0..3n-1, once each).
func rewindableShapes(t *testing.T, name string, n int64, d time.Duration, seeks *seekLog) ([]branch, func(map[string]string) (*topology.Topology, error)) {
	branches := []branch{{"direct", flowtest.NewSink(), n, 1}, {"all", flowtest.NewSink(), n, 2}, {"fanned", flowtest.NewSink(), 3 * n, 1}}
	return branches, func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout {
			return &seekRecorder{rewindable{numbers{n: n, d: d}}, seeks}
		}, 1).Outputs("n")
		b.Bolt("pre", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("copy", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.All()).Outputs("n")
		b.Bolt("fan", func() topology.Bolt { return &fanOut{k: 3} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
		for i, from := range []string{"pre", "copy", "fan"} {
			b.Bolt(branches[i].name, branches[i].sink.Bolt, 1).Input(from, topology.Shuffle())
		}
		return build(t, b), nil
	}
}

// checkReadOn fails t if a branch got a value more often than its shape
// says (at most once sent something twice), lacks its last value (the
// moved spout did not read to the end), or lost more than a quarter.
func checkReadOn(t *testing.T, branches []branch) {
	t.Helper()
	for _, br := range branches {
		short, over, foreign := br.tally()
		last := sinkCounts(br.sink)[br.size-1]
		t.Logf("%s: %d of %d values short of %d, %d over; the last one %d times", br.name, short, br.size, br.want, over, last)
		switch {
		case over > 0 || foreign > 0:
			t.Fatalf("%s: at-most-once delivered %d values more often than the shape says (%d foreign): the moved spout read its source again", br.name, over, foreign)
		case last != br.want:
			t.Fatalf("%s: the last value arrived %d times, want %d: the moved spout did not read on", br.name, last, br.want)
		case short > int(br.size)/4:
			t.Fatalf("%s: %d of %d values short: more than the move had in flight", br.name, short, br.size)
		}
	}
}

// TestNodesAtMostOnceSpoutReadsOnWhereItStopped: at most once, a spout
// over a rewindable source writes its position before it sends what it
// read (cluster.Positions). Its worker leaves mid-run, its slot moves,
// and the spout on the new owner reads on from the position written last:
// in three shapes (a shuffled pass, an All grouping, a fan-out) no value
// reaches its sink more often than the shape says (a spout that started
// over would send every value again), and the spout reads to the end.
func TestNodesAtMostOnceSpoutReadsOnWhereItStopped(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const n = 3000
		name := "amopos"
		branches, topo := rewindableShapes(t, name, n, 3*time.Second, nil)
		nd := startNodesOn(t, c, name, topo)
		nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-most-once"})
		nd.stopSpoutWorkerToTheEnd(name)

		checkReadOn(t, branches)
	})
}

// stopSpoutWorkerToTheEnd waits until n1, n2 and n3 run topology name,
// stops the worker of its task 0 (the spout's) a second later, and waits
// until the slot has moved and the topology finished.
func (n *nodes) stopSpoutWorkerToTheEnd(name string) {
	t := n.t
	t.Helper()
	first := n.awaitPlan(name, 0, "n1", "n2", "n3")
	time.Sleep(time.Second) // about a third of rewindableShapes' values are read
	gen, _, err := n.gens.Current(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	victim := gen.Owner(gen.Assignment[0])
	n.stop(victim)
	moved := n.awaitMove(name, first, victim)
	t.Logf("%s, the spout's worker, left; its slot moved to %s", victim, moved.Moves[victim].To)
	n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	n.stopAll()
}

// TestNodesAtMostOnceSpoutCutOffSendsNothingMore: the worker that runs an
// at-most-once spout over a rewindable source is cut off from NATS past
// its lease. It cannot write its position, so it holds what it reads;
// the spout's slot moves and its new owner claims the position. When the
// cut-off worker comes back, its next write finds the new owner's and it
// drops what it held instead of sending it: no value reaches its sink
// more often than its shape says (rewindableShapes), and the spout reads
// to the end on its new owner.
func TestNodesAtMostOnceSpoutCutOffSendsNothingMore(t *testing.T) {
	verifyNoLeaks(t)
	const n = 4000
	name := "amocut"
	branches, topo := rewindableShapes(t, name, n, 4*time.Second, nil)
	nd := startNodes(t, name, topo)
	nets := map[string]*cutter{}
	members := []string{"n1", "n2", "n3"}
	for _, m := range members {
		net := &cutter{}
		nets[m] = net
		nd.configure = func(c *workers.Config) {
			c.NATSOptions = append(c.NATSOptions, nats.SetCustomDialer(net), nats.ReconnectWait(50*time.Millisecond))
		}
		nd.start(m)
	}
	nd.configure = nil
	nd.awaitMembers(members...)
	ctx := context.Background()
	if err := nd.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-most-once"}); err != nil {
		t.Fatal(err)
	}
	nd.await(30*time.Second, func(s string) bool { return s == cluster.StateRunning })
	time.Sleep(time.Second)
	gen, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	victim := gen.Owner(gen.Assignment[0]) // task 0 is the spout's
	nets[victim].sever()
	moved := nd.awaitMove(name, gen.Number, victim)
	t.Logf("%s, the spout's worker, cut off; its slot moved to %s", victim, moved.Moves[victim].To)
	time.Sleep(500 * time.Millisecond)
	nets[victim].heal()
	nd.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	nd.stopAll()

	stale := slices.ContainsFunc(nd.logs.lines(), func(l string) bool {
		return strings.Contains(l, "another worker runs this at-most-once spout task now")
	})
	checkReadOn(t, branches)
	if !stale {
		t.Fatal("the cut-off spout never found the new owner's position: the test proves nothing")
	}
}

// TestNodesAtMostOnceSpoutPositionPassesUnsubscribedRecords: an
// at-most-once spout whose records go to a stream no task subscribes to
// leaves no frame to hold, but its position must pass those records too.
// Its worker leaves after it read about half of them, and its task,
// started again elsewhere, must seek to where it stopped, not to the
// beginning: a task started again that often, with the position never
// written, read from the beginning each time and never reached its end
// (found by randshapes' crash chaos, which now crashes such spouts).
func TestNodesAtMostOnceSpoutPositionPassesUnsubscribedRecords(t *testing.T) {
	verifyNoLeaks(t)
	const n = 2000
	name := "amounsubscribed"
	var log seekLog
	nd := startNodesOn(t, inMemory, name, func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout {
			return &seekRecorder{rewindable{numbers{n: n, d: 2 * time.Second, stream: "unsubscribed"}}, &log}
		}, 1).Outputs("n").Stream("unsubscribed", "n")
		b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("numbers", topology.Shuffle())
		return build(t, b), nil
	})
	nd.submitOn(cluster.Spec{Name: name, Guarantee: "at-most-once"}, "n1", "n2")
	first := nd.awaitPlan(name, 0, "n1", "n2")
	ctx := context.Background()
	time.Sleep(time.Second) // about half of the numbers are read
	gen, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	victim := gen.Owner(gen.Assignment[0]) // task 0 is the spout's
	nd.stop(victim)
	nd.awaitMove(name, first, victim)
	nd.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	nd.stopAll()

	seeks := log.all()
	t.Logf("the spout's tasks sought to %v", seeks)
	// The first task finds no position and reads from the beginning; the
	// moved one seeks to where the first stopped.
	if len(seeks) == 0 || seeks[len(seeks)-1] < n/4 {
		t.Fatalf("the spout's task on the new owner sought to %v of %d numbers, after about half were read: the position did not pass the records nobody subscribes to", seeks, n)
	}
}

// seekRecorder notes in log, if not nil, every position its spout seeks
// to.
type seekRecorder struct {
	rewindable
	log *seekLog
}

func (s *seekRecorder) Seek(pos []byte) error {
	if err := s.rewindable.Seek(pos); err != nil {
		return err
	}
	if s.log != nil {
		s.log.mu.Lock()
		s.log.at = append(s.log.at, s.next)
		s.log.mu.Unlock()
	}
	return nil
}

// seekLog is where a spout's tasks sought to, in order.
type seekLog struct {
	mu sync.Mutex
	at []int64
}

func (l *seekLog) all() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at)
}

// TestNodesAtLeastOnceSpoutReadsOnFromItsOldestRecordNotDone: without
// checkpoints, an at-least-once spout over a rewindable source writes the
// position before its oldest root not yet done (rootMarks). Its worker
// leaves after about a third of the numbers were read, and the spout
// started on the new owner seeks there, not to the beginning; in three
// shapes (rewindableShapes) every value still reaches its sink as often
// as the shape says, and few more often (the stateless bolts and sinks
// run what the spout reads again: a spout that read from the beginning
// sent a third of the values twice).
func TestNodesAtLeastOnceSpoutReadsOnFromItsOldestRecordNotDone(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const n = 3000
		name := "alopos"
		var log seekLog
		branches, topo := rewindableShapes(t, name, n, 3*time.Second, &log)
		nd := startNodesOn(t, c, name, topo)
		nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-least-once", NoCheckpoints: true})
		nd.stopSpoutWorkerToTheEnd(name)

		for _, br := range branches {
			short, over, foreign := br.tally()
			t.Logf("%s: %d of %d values short of %d, %d over", br.name, short, br.size, br.want, over)
			if short > 0 || foreign > 0 {
				t.Fatalf("%s: %d values arrived fewer than %d times (%d foreign): at least once lost them", br.name, short, br.want, foreign)
			}
			if over > int(br.size)/6 {
				t.Fatalf("%s: %d of %d values arrived more than %d times: the moved spout read again more than was in flight", br.name, over, br.size, br.want)
			}
		}
		seeks := log.all()
		t.Logf("the spout's tasks sought to %v", seeks)
		// The first task finds no position and reads from the beginning;
		// the moved one seeks to where the records not yet done began.
		if len(seeks) == 0 || seeks[len(seeks)-1] < n/5 {
			t.Fatalf("the spout's task on the new owner sought to %v of %d numbers, after about a third were read: it read its source again from the beginning", seeks, n)
		}
	})
}

// preparedBolt counts the Prepares of the bolt it wraps: how often its
// task started.
type preparedBolt struct {
	topology.Bolt
	prepared *atomic.Int64
}

func (b *preparedBolt) Prepare(tc topology.TaskContext, out topology.Collector) error {
	b.prepared.Add(1)
	return b.Bolt.Prepare(tc, out)
}

// TestNodesKeepAStatefulSlotWhereItMovedWithoutCheckpoints: without
// checkpoints, the slot of a worker that leaves moves with its keyed
// counter, which starts again without its state (the leader says so).
// When that worker comes back, the slot stays where it moved: moving it
// back gave the worker its slot again within the generation and started
// the counter a third time, dropping the counts it had rebuilt, with only
// a warning about trees in flight. The counter's task starts twice, the
// worker that came back gets no task, and the run ends.
func TestNodesKeepAStatefulSlotWhereItMovedWithoutCheckpoints(t *testing.T) {
	verifyNoLeaks(t)
	const n = 4000
	name := "keepstate"
	var prepared atomic.Int64
	var mu sync.Mutex
	result := map[string]int64{}
	nd := startNodesOn(t, inMemory, name, func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: n, d: 5 * time.Second}} }, 1).Outputs("n")
		b.Bolt("pre", func() topology.Bolt { return &pass{} }, 8).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("count", func() topology.Bolt {
			return &preparedBolt{&keyedCounter{mu: &mu, result: result}, &prepared}
		}, 1).KeyedState().Input("pre", topology.Fields("n")).Outputs("n")
		b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("count", topology.Shuffle())
		return build(t, b), nil
	})
	nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-least-once", NoCheckpoints: true})
	// Every worker holds a slot: a worker without one that joins with the
	// one that comes back would keep the slot from moving back anyway.
	first := nd.awaitPlan(name, 0, "n1", "n2", "n3")
	ctx := context.Background()
	time.Sleep(time.Second)
	gen, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	built, _ := nd.build(nil)
	tasks, err := workers.Tasks(built, workers.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	victim := ""
	for _, tk := range tasks {
		if tk.Component == "count" {
			victim = gen.Assignment[tk.ID]
		}
	}
	nd.stop(victim)
	moved := nd.awaitMove(name, first, victim)
	to := moved.Moves[victim].To
	t.Logf("%s, the counter's worker, left; its slot moved to %s", victim, to)
	nd.start(victim)
	nd.awaitMembers("n1", "n2", "n3")
	time.Sleep(time.Second) // ten status rounds for the leader to decide
	now, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if now.Number != first || now.Moves[victim].To != to {
		t.Fatalf("after %s came back: generation %d (%s), its slot with %s, want generation %d with %s", victim, now.Number, now.Reason, now.Moves[victim].To, first, to)
	}
	nd.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	nd.stopAll()
	if got := prepared.Load(); got != 2 {
		t.Fatalf("the counter's task started %d times, want 2 (before and after the move)", got)
	}
	if !slices.ContainsFunc(nd.logs.lines(), func(l string) bool {
		return strings.Contains(l, "the workers that joined get tasks when one of the others is lost")
	}) {
		t.Fatal("the leader never said why the worker that came back got no task")
	}
}

// selfReplayingRewindable is a rewindable spout that says it replays its
// failed records itself (and here replays none).
type selfReplayingRewindable struct{ seekRecorder }

func (*selfReplayingRewindable) ReplaysItself() bool { return true }

// TestNodesSelfReplayingSpoutWritesNoPosition: at least once without
// checkpoints, a spout that replays its failed records itself keeps them
// where the runtime cannot count them, so the runtime writes no position
// for it (a position past a failed record would lose it): its task moved
// after its worker left seeks nowhere and reads from the beginning, and
// no value is lost.
func TestNodesSelfReplayingSpoutWritesNoPosition(t *testing.T) {
	verifyNoLeaks(t)
	const n = 3000
	name := "selfreplaypos"
	var log seekLog
	sink := flowtest.NewSink()
	nd := startNodesOn(t, inMemory, name, func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout {
			return &selfReplayingRewindable{seekRecorder{rewindable{numbers{n: n, d: 3 * time.Second}}, &log}}
		}, 1).Outputs("n")
		b.Bolt("pre", func() topology.Bolt { return &pass{} }, 6).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("sink", sink.Bolt, 3).Input("pre", topology.Shuffle())
		return build(t, b), nil
	})
	nd.submitOnThree(cluster.Spec{Name: name, Guarantee: "at-least-once", NoCheckpoints: true})
	nd.stopSpoutWorkerToTheEnd(name)
	if seeks := log.all(); len(seeks) > 0 {
		t.Fatalf("the self-replaying spout's tasks sought to %v: a position was written for it", seeks)
	}
	got := sinkCounts(sink)
	for v := range int64(n) {
		if got[v] == 0 {
			t.Fatalf("value %d never reached the sink", v)
		}
	}
}
