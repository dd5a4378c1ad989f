package workers_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// failingSpout is a rewindable numbers spout whose Next fails once, for
// the whole cluster, when it reaches at: a source that lost its
// connection.
type failingSpout struct {
	rewindable
	at     int64
	failed *atomic.Bool
}

func (s *failingSpout) Next(ctx context.Context) error {
	if s.next >= s.at && s.failed.CompareAndSwap(false, true) {
		return errors.New("the source went away (injected)")
	}
	return s.rewindable.Next(ctx)
}

// failingPrepare is pass whose Prepare fails the first times it is
// called in the cluster: a bolt that cannot reach what it needs at start.
type failingPrepare struct {
	pass
	left *atomic.Int64
}

func (p *failingPrepare) Prepare(tc topology.TaskContext, out topology.Collector) error {
	if p.left.Add(-1) >= 0 {
		return errors.New("the bolt cannot prepare (injected)")
	}
	return p.pass.Prepare(tc, out)
}

// TestNodesRestartAGenerationWhoseTasksFailed: a bolt that cannot prepare
// in the first generation, and later a spout whose Next fails, end their
// worker's tasks of the generation. The worker reports the failure, the
// leader starts the next generation from the latest checkpoint, and the
// topology finishes with every number counted (exactly once under
// exactly-once); before, the generation waited for those tasks for good.
func TestNodesRestartAGenerationWhoseTasksFailed(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		for _, g := range []string{"at-least-once", "exactly-once"} {
			t.Run(g, func(t *testing.T) {
				verifyNoLeaks(t)
				const count = 3000
				name := "fail-" + g[:1]
				var mu sync.Mutex
				result := map[string]int64{}
				var spoutFailed atomic.Bool
				var prepareFails atomic.Int64
				prepareFails.Store(2)
				n := startNodesOn(t, c, name, func(map[string]string) (*topology.Topology, error) {
					b := topology.NewBuilder(name)
					b.Spout("numbers", func() topology.Spout {
						return &failingSpout{rewindable: rewindable{numbers{n: count, d: 3 * time.Second}}, at: count / 2, failed: &spoutFailed}
					}, 1).Outputs("n")
					b.Bolt("pre", func() topology.Bolt { return &failingPrepare{left: &prepareFails} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
					b.Bolt("count", func() topology.Bolt { return &keyedCounter{mu: &mu, result: result} }, 2).KeyedState().
						Input("pre", topology.Fields("n")).Outputs("n")
					b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("count", topology.Shuffle())
					return b.Build()
				})
				for _, m := range []string{"n1", "n2", "n3"} {
					n.start(m)
				}
				start := time.Now()
				err := n.reg.Submit(context.Background(), cluster.Spec{Name: name, Guarantee: g, CheckpointEvery: 200 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
				gen, _, err := n.gens.Current(context.Background(), name)
				if err != nil {
					t.Fatal(err)
				}
				n.awaitMembersEnded() // Cleanup has run
				n.stopAll()
				t.Logf("finished after %v in generation %d (%s)", time.Since(start).Round(time.Millisecond), gen.Number, gen.Reason)
				if !spoutFailed.Load() || prepareFails.Load() >= 0 {
					t.Fatalf("the spout failed: %v; prepare failures left: %d: the test proves nothing", spoutFailed.Load(), prepareFails.Load())
				}
				if gen.Number < 3 {
					t.Fatalf("finished in generation %d: the failures should each have started a new one", gen.Number)
				}
				mu.Lock()
				defer mu.Unlock()
				if g == "exactly-once" {
					expectCounted(t, result, count)
					return
				}
				for i := int64(0); i < count; i++ {
					if result[strconv.FormatInt(i, 10)] < 1 {
						t.Fatalf("%d never counted", i)
					}
				}
			})
		}
	})
}

// TestNodesNeverRestoreAnEarlierSubmissionsCheckpoint: a topology is
// submitted again without resume, and loses the worker of its spout
// before it has taken a checkpoint of its own. The next generation starts
// the sources over; before, it restored the earlier submission's final
// checkpoint, whose state and positions belong to other input.
func TestNodesNeverRestoreAnEarlierSubmissionsCheckpoint(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const name = "floor-nodes"
		var mu sync.Mutex
		result := map[string]int64{}
		var opens atomic.Int32
		second := atomic.Bool{}
		n := startNodesOn(t, c, name, func(map[string]string) (*topology.Topology, error) {
			if second.Load() {
				return offsetTopology(t, name, 5000, 3000, &opens, result, &mu), nil
			}
			return offsetTopology(t, name, 0, 1000, nil, result, &mu), nil
		})
		for _, m := range []string{"n1", "n2", "n3"} {
			n.start(m)
		}
		ctx := context.Background()
		if err := n.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
		// The first submission's counters write their result in Cleanup
		// once their members see the state (CI once counted one after
		// the clear).
		n.awaitMembersEnded()
		mu.Lock()
		clear(result)
		mu.Unlock()
		second.Store(true)
		if err := n.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "exactly-once", CheckpointEvery: time.Hour}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for opens.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the second submission's spout never opened")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // the spout holds halfway
		gen, _, err := n.gens.Current(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		spoutOwner := gen.Owner(gen.Assignment[0])
		t.Logf("generation %d (floor %d): stopping %s, which runs the spout", gen.Number, gen.Floor, spoutOwner)
		n.stop(spoutOwner)
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
		last, _, err := n.gens.Current(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		n.awaitMembersEnded()
		n.stopAll()
		t.Logf("finished in generation %d, restored from %d (floor %d)", last.Number, last.RestoreFrom, last.Floor)
		if opens.Load() < 2 {
			t.Fatal("the spout was not restarted: the test proves nothing")
		}
		mu.Lock()
		defer mu.Unlock()
		expectOnly(t, result, 5000, 3000)
	})
}

// TestNodesFailATopologyWhoseTasksKeepFailing: with FailAfter, a bolt that
// can never prepare makes the leader give up after that many generations
// instead of starting new ones for good: the topology is failed, says
// why, its workers stop its tasks, and its name can be submitted again.
func TestNodesFailATopologyWhoseTasksKeepFailing(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const name = "failing"
		var mu sync.Mutex
		result := map[string]int64{}
		var prepareFails atomic.Int64
		prepareFails.Store(1 << 30)
		n := startNodesOn(t, c, name, func(map[string]string) (*topology.Topology, error) {
			b := topology.NewBuilder(name)
			b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: 1000, d: time.Second}} }, 1).Outputs("n")
			b.Bolt("pre", func() topology.Bolt { return &failingPrepare{left: &prepareFails} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
			b.Bolt("count", func() topology.Bolt { return &keyedCounter{mu: &mu, result: result} }, 1).KeyedState().
				Input("pre", topology.Fields("n")).Outputs("n")
			return b.Build()
		})
		n.start("n1")
		n.start("n2")
		n.awaitMembers("n1", "n2") // a join would be a generation of its own
		ctx := context.Background()
		if err := n.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-least-once", FailAfter: 2}); err != nil {
			t.Fatal(err)
		}
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFailed })
		spec, _, err := n.reg.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		gen, _, err := n.gens.Current(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("failed in generation %d: %s", gen.Number, spec.Error)
		if !strings.Contains(spec.Error, "cannot prepare (injected)") || !strings.Contains(spec.Error, "2 times in a row") {
			t.Fatalf("the failed topology says %q", spec.Error)
		}
		if gen.Number != 2 {
			t.Fatalf("failed in generation %d; the first failure starts generation 2, the second fails the topology", gen.Number)
		}
		// Its workers stop its tasks: no report of it shows one.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			reports, err := n.statuses.List(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			running := 0
			for _, cr := range reports {
				if rep, err := workers.DecodeReport(cr); err == nil && rep.Status != nil {
					running += len(rep.Status.Tasks)
				}
			}
			if running == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d tasks of the failed topology still run after 10 s", running)
			}
		}
		prepareFails.Store(0)
		if err := n.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-least-once"}); err != nil {
			t.Fatalf("a failed topology's name cannot be submitted again: %v", err)
		}
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
		n.awaitMembersEnded() // Cleanup has run
		n.stopAll()
		mu.Lock()
		defer mu.Unlock()
		for i := int64(0); i < 1000; i++ {
			if result[strconv.FormatInt(i, 10)] < 1 {
				t.Fatalf("the resubmission never counted %d", i)
			}
		}
	})
}
