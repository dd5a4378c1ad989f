package workers_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
)

// statelessPartial is partial without Snapshot and Restore: a stateless
// bolt that fails one input in ten after two of its four outputs, the
// first time it sees it.
type statelessPartial struct{ p partial }

func (s *statelessPartial) Prepare(tc topology.TaskContext, out topology.Collector) error {
	return s.p.Prepare(tc, out)
}
func (s *statelessPartial) Execute(in *topology.Tuple) { s.p.Execute(in) }
func (s *statelessPartial) Cleanup() error             { return nil }

// movesTopology has few stateful tasks (the spout and three keyed counts,
// one task each) and seven stateless ones in three shapes: an All
// grouping, a fan-out, and a failed partial emit.
func movesTopology(t *testing.T, name string, n, k int64, tl *tallies, failed map[int64]bool, mu *sync.Mutex) *topology.Topology {
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: n, d: 6 * time.Second}} }, 1).Outputs("n")
	b.Bolt("copy", func() topology.Bolt { return &pass{} }, 3).Input("numbers", topology.All()).Outputs("n")
	b.Bolt("all", tl.counter("all"), 1).KeyedState().Input("copy", topology.Fields("n")).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: k} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("fanned", tl.counter("fanned"), 1).KeyedState().Input("fan", topology.Fields("n")).Outputs("n")
	b.Bolt("half", func() topology.Bolt { return &statelessPartial{partial{mu: mu, failed: failed}} }, 2).Input("numbers", topology.Fields("n")).Outputs("n")
	b.Bolt("quartered", tl.counter("quartered"), 1).KeyedState().Input("half", topology.Fields("n")).Outputs("n")
	return build(t, b)
}

// TestNodesMoveAStatelessSlotWithoutRollingBack runs an at-least-once
// topology on four nodes under frame loss, duplication and failed inputs,
// and cuts a node whose tasks are all stateless off from NATS past its
// lease. The leader moves that node's slot to a live node within the
// running generation instead of rolling every task back to a checkpoint:
// the generation's number stays, its Moves name the new owner, and no
// stateful task restarts. The node then comes back, finds its slot gone,
// drops its tasks, and gets the slot back, again within the generation
// (no handover). The oracle:
// every branch's keyed state counts each value at least as often as the
// shape says, and the run reports how many it counted more than once.
// Over an in-memory cluster, where the membership does not go through
// NATS, the node is stopped instead, and started again.
func TestNodesMoveAStatelessSlotWithoutRollingBack(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		testMoveAStatelessSlot(t, c, func(c *workers.Config) {
			c.Chaos = chaos.Config{Drop: 0.02, Dup: 0.01, Reorder: 0.05, Fail: 0.002, Seed: 7}
		})
	})
}

// TestNodesMoveASlotWhoseFirstFramesAreLost moves a slot while a fifth of
// the spout's frames are lost, so that the first frames the spout sends
// the slot's new owner are often lost too. The new owner counts the
// spout's frames from the first that reaches it; the spout's LinkStart
// says where they began, and the new owner asks for the ones it missed.
// (Before LinkStart, their trees waited for the message timeout: two runs
// in three took 30 s longer.) The message timeout here is longer than the
// test waits for anything, so a tree that depends on it fails the test.
func TestNodesMoveASlotWhoseFirstFramesAreLost(t *testing.T) {
	testMoveAStatelessSlot(t, inMemory, func(c *workers.Config) {
		c.Chaos = chaos.Config{Drop: 0.2, Seed: 11}
		c.ChaosComponents = []string{"numbers"}
		c.MessageTimeout = 10 * time.Minute
	})
}

func testMoveAStatelessSlot(t *testing.T, c coordination, withChaos func(*workers.Config)) {
	verifyNoLeaks(t)
	const n, k = 3000, 3
	const name = "moves23" // three of four nodes hold only stateless tasks (rendezvous hashing)
	tl := &tallies{branch: map[string]map[string]int64{}}
	var mu sync.Mutex
	failed := map[int64]bool{}
	topo := func(map[string]string) (*topology.Topology, error) {
		return movesTopology(t, name, n, k, tl, failed, &mu), nil
	}
	nd := startNodesOn(t, c, name, topo)
	nd.configure = func(c *workers.Config) {
		withChaos(c)
		c.MaxAttempts = 0 // the oracle needs every record
	}
	nets := map[string]*cutter{}
	regs := map[string]*metrics.Registry{}
	members := []string{"n1", "n2", "n3", "n4"}
	for _, m := range members {
		regs[m] = metrics.NewRegistry()
		net := &cutter{}
		nets[m] = net
		configure := nd.configure
		nd.configure = func(c *workers.Config) {
			configure(c)
			c.NATSOptions = append(c.NATSOptions, nats.SetCustomDialer(net), nats.ReconnectWait(50*time.Millisecond))
		}
		nd.startWith(m, regs[m])
		nd.configure = configure
	}
	ctx := context.Background()
	if err := nd.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-least-once", CheckpointEvery: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	first := nd.awaitPlan(name, 0, members...)
	time.Sleep(time.Second) // records flow, and checkpoints complete
	g, _, err := nd.gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	leader := nd.leader(name)
	built, _ := topo(nil)
	cfg := workers.DefaultConfig()
	cfg.Guarantee = workers.AtLeastOnce
	tasks, err := workers.Tasks(built, cfg)
	if err != nil {
		t.Fatal(err)
	}
	victim := ""
	for _, m := range members {
		stateless := true
		for _, tk := range tasks {
			if g.Assignment[tk.ID] == m && tk.Stateful {
				stateless = false
			}
		}
		if stateless && m != leader && slices.Contains(slices.Collect(maps.Values(g.Assignment)), m) {
			victim = m
			break
		}
	}
	if victim == "" {
		t.Fatalf("no node but the leader %s holds only stateless tasks in %v; rename the nodes or the topology", leader, g.Assignment)
	}
	fault, heal, what := nets[victim].sever, nets[victim].heal, "cut off"
	if c == inMemory {
		what = "stopped"
		fault = func() { nd.stop(victim) }
		heal = func() { nd.startWith(victim, regs[victim]) }
	}
	cut := time.Now()
	fault()
	moved := nd.awaitMove(name, first, victim)
	mv := moved.Moves[victim]
	if mv.To == victim || mv.Incarnation != 1 || !slices.Contains(members, mv.To) {
		t.Fatalf("the slot of %s moved to %q as incarnation %d", victim, mv.To, mv.Incarnation)
	}
	t.Logf("%s (stateless) %s; its slot moved to %s %v later, in generation %d", victim, what, mv.To, time.Since(cut).Round(time.Millisecond), moved.Number)
	// The new owner reports the moved tasks as its own, begun, beside
	// those of its own slot.
	var slotTasks []int
	for id, m := range g.Assignment {
		if m == victim {
			slotTasks = append(slotTasks, id)
		}
	}
	runs := func(rep workers.Report) bool {
		if rep.Generation != first || rep.Status == nil || !rep.Status.Begun {
			return false
		}
		for _, id := range slotTasks {
			if !slices.ContainsFunc(rep.Status.Tasks, func(ts workers.TaskStatus) bool { return ts.Task == id }) {
				return false
			}
		}
		return true
	}
	nd.awaitReport(name, mv.To, 10*time.Second, runs)
	leaderMetrics := gatherRegistry(t, regs[leader])
	if got := leaderMetrics.sum("ackflow_slot_moves_total", map[string]string{"topology": name}); got != 1 {
		t.Fatalf("the leader %s counts %v slot moves, want 1", leader, got)
	}
	// The failover took from noticing the death until the new owner was
	// ready: more than nothing, less than the time since the cut. (The
	// leader records it right after it answers the new owner's "ready",
	// so it may lag the new owner's report by a moment.)
	recovery := 0.0
	for deadline := time.Now().Add(2 * time.Second); recovery == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recovery = gatherRegistry(t, regs[leader]).sum("ackflow_recovery_seconds", map[string]string{"topology": name})
	}
	if recovery <= 0 || recovery > time.Since(cut).Seconds() {
		t.Fatalf("the leader %s shows a recovery of %v s, %v after the cut", leader, recovery, time.Since(cut))
	}
	t.Logf("recovery as the leader measured it: %.3f s", recovery)
	// Checkpoints go on with the moved tasks answering: the leader's
	// latest complete epoch advances past the one when the slot moved.
	var movedAt uint64
	nd.awaitReport(name, leader, 5*time.Second, func(rep workers.Report) bool {
		movedAt = rep.Checkpoint
		return rep.Leader
	})
	nd.awaitReport(name, leader, 10*time.Second, func(rep workers.Report) bool { return rep.Checkpoint > movedAt+1 })
	time.Sleep(time.Second) // the records flow on without it
	heal()
	// Back, it finds its slot moved away and drops its tasks of it; the
	// leader gives the slot back to it, again within the generation.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		back, _, err := nd.gens.Current(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if back.Number != first {
			// A leader elected since learns that the generation began
			// from the members' "ready" (once a second): before, it
			// hands over instead of moving the slot back.
			t.Fatalf("generation %d replaced %d when %s came back (%s); its slot should have moved back (leader %s, %s before the cut)", back.Number, first, victim, back.Reason, nd.leader(name), leader)
		}
		if m := back.Moves[victim]; m.To == victim && m.Incarnation == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of %s did not come back to it in 20 s: %+v", victim, back.Moves)
		}
	}
	nd.awaitReport(name, victim, 10*time.Second, runs)
	nd.await(2*time.Minute, func(s string) bool { return s == cluster.StateFinished })
	nd.awaitMembersEnded() // Cleanup has run
	nd.stopAll()
	tl.expect(t, "all", n, 3, false)
	tl.expect(t, "fanned", n*k, 1, false)
	tl.expect(t, "quartered", 4*n, 1, false)
	t.Logf("counted more than once: all %d, fanned %d, quartered %d", tl.excess("all", 3), tl.excess("fanned", 1), tl.excess("quartered", 1))
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != n/10 {
		t.Fatalf("half failed %d inputs, want %d", len(failed), n/10)
	}
}

// awaitMove waits until the slot of victim, which died, has moved within
// generation first, and returns the amended generation; it fails the test
// if another generation replaces first, or nothing moves in 20 s.
func (n *nodes) awaitMove(topo string, first uint64, victim string) cluster.Generation {
	n.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		moved, _, err := n.gens.Current(context.Background(), topo)
		if err != nil {
			n.t.Fatal(err)
		}
		if moved.Number != first {
			n.t.Fatalf("generation %d replaced %d after %s died (%s); its slot should have moved within the generation", moved.Number, first, victim, moved.Reason)
		}
		if _, ok := moved.Moves[victim]; ok {
			return moved
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the slot of %s did not move in 20 s: %+v", victim, moved)
		}
	}
}

// excess is how many counts of branch exceed want.
func (t *tallies) excess(branch string, want int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sum int64
	for _, c := range t.branch[branch] {
		sum += max(0, c-want)
	}
	return sum
}

// awaitReport polls member's status report of topo until ok accepts it.
func (n *nodes) awaitReport(topo, member string, d time.Duration, ok func(workers.Report) bool) {
	n.t.Helper()
	ctx := context.Background()
	var last workers.Report
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		reports, err := n.statuses.List(ctx, topo)
		if err != nil {
			n.t.Fatal(err)
		}
		for _, cr := range reports {
			if rep, err := workers.DecodeReport(cr); err == nil && rep.Member == member {
				if last = rep; ok(rep) {
					return
				}
			}
		}
	}
	n.t.Fatalf("%s's report of %s is not as expected after %v: %+v", member, topo, d, last)
}
