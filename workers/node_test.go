package workers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// nodes runs worker processes of a cluster as goroutines of this test,
// each with its own NATS connection, on an embedded server.
type nodes struct {
	t      *testing.T
	url    string
	build  func(map[string]string) (*topology.Topology, error)
	name   string
	cancel map[string]context.CancelFunc
	errs   map[string]chan error
	reg    cluster.Registry
	gens   cluster.Generations
	// statuses holds the nodes' status reports.
	statuses cluster.Statuses
	elector  cluster.Elector
	members  cluster.Members
	nc       *nats.Conn
	// configure, if set, changes the runtime configuration of the nodes
	// started after it is set.
	configure func(*workers.Config)
	// place, if set, is the placement policy of the nodes started after
	// it is set (NodeConfig.Place).
	place func(tasks []workers.TaskRef, workers []string) map[int]string
	// logs holds the nodes' logs (info and above), printed when the test
	// fails.
	logs logBuffer
	// memory, if set, is the cluster the nodes coordinate through, with
	// the checkpoint store and dead letters they share.
	memory      *cluster.MemoryCluster
	checkpoints checkpoint.Store
	deadLetters deadletter.Sink
}

// coordination is what a test's nodes coordinate through.
type coordination int

const (
	// kvBuckets are the KV buckets on the NATS server, as worker
	// processes use them.
	kvBuckets coordination = iota
	// inMemory is a cluster.MemoryCluster, every node in this process, on
	// a NATS server without JetStream: nothing but records goes over NATS.
	inMemory
)

func (c coordination) String() string {
	if c == inMemory {
		return "in-memory"
	}
	return "kv"
}

// eachCoordination runs f over the KV buckets and over an in-memory
// cluster: the control plane behaves the same over both.
func eachCoordination(t *testing.T, f func(t *testing.T, c coordination)) {
	for _, c := range []coordination{kvBuckets, inMemory} {
		t.Run(c.String(), func(t *testing.T) { f(t, c) })
	}
}

// verifyNoLeaks checks for leaked goroutines when t ends, after the
// cleanups that stop the nodes and the server (cleanups run last-in
// first-out).
func verifyNoLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

var nodeTiming = cluster.MembersConfig{HeartbeatEvery: 150 * time.Millisecond, DeadAfter: 600 * time.Millisecond}

func startNodes(t *testing.T, name string, build func(map[string]string) (*topology.Topology, error)) *nodes {
	return startNodesOn(t, kvBuckets, name, build)
}

func startNodesOn(t *testing.T, c coordination, name string, build func(map[string]string) (*topology.Topology, error)) *nodes {
	srv, err := embednats.Start(embednats.Config{NoJetStream: c == inMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	n := &nodes{t: t, url: srv.URL(), build: build, name: name, cancel: map[string]context.CancelFunc{}, errs: map[string]chan error{}}
	if n.nc, err = nats.Connect(n.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.nc.Close)
	t.Cleanup(n.stopAll)
	t.Cleanup(n.printLogsIfFailed)
	if c == inMemory {
		if n.memory, err = cluster.NewMemoryCluster(nodeTiming); err != nil {
			t.Fatal(err)
		}
		h, err := n.memory.Open(nodeTiming)
		if err != nil {
			t.Fatal(err)
		}
		n.reg, n.gens, n.statuses, n.elector, n.members = h.Registry, h.Generations, h.Statuses, h.Elector, h.Members
		n.checkpoints, n.deadLetters = checkpoint.NewMemory(), deadletter.NewMemory()
		return n
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cluster.OpenKV(context.Background(), js, nodeTiming)
	if err != nil {
		t.Fatal(err)
	}
	n.reg, n.gens, n.statuses, n.elector, n.members = h.Registry, h.Generations, h.Statuses, h.Elector, h.Members
	return n
}

func (n *nodes) start(member string) { n.startWith(member, nil) }

// startWith starts a node that shows its metrics in reg (nil: none).
func (n *nodes) startWith(member string, reg *metrics.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	rt := workers.DefaultConfig()
	rt.Logger = zerolog.New(&n.logs).Level(zerolog.InfoLevel).With().Timestamp().Str("node", member).Logger()
	rt.Metrics = reg
	if n.memory != nil {
		rt.Checkpoints, rt.DeadLetters = n.checkpoints, n.deadLetters
	}
	if n.configure != nil {
		n.configure(&rt)
	}
	errc := make(chan error, 1)
	n.cancel[member], n.errs[member] = cancel, errc
	cfg := workers.NodeConfig{Name: member, NATSURL: n.url, Runtime: rt, Members: nodeTiming, Memory: n.memory, Place: n.place,
		StatusEvery: 100 * time.Millisecond, Topologies: map[string]func(map[string]string) (*topology.Topology, error){n.name: n.build}}
	go func() { errc <- workers.RunNode(ctx, cfg) }()
}

// awaitMembers waits until the cluster lists exactly want.
func (n *nodes) awaitMembers(want ...string) {
	n.t.Helper()
	slices.Sort(want)
	var names []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ms, err := n.members.List(context.Background())
		if err != nil {
			n.t.Fatal(err)
		}
		names = names[:0]
		for _, m := range ms {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		if slices.Equal(names, want) {
			return
		}
	}
	n.t.Fatalf("the members are %v after 10 s, want %v", names, want)
}

// stop ends a node as Ctrl-C would: it leaves the cluster.
func (n *nodes) stop(member string) {
	n.cancel[member]()
	if err := <-n.errs[member]; err != nil {
		n.t.Errorf("node %s: %v", member, err)
	}
	delete(n.cancel, member)
}

// printLogsIfFailed prints the last lines the nodes logged, when the test
// failed: the leaders' decisions explain most failures of these tests.
func (n *nodes) printLogsIfFailed() {
	if !n.t.Failed() {
		return
	}
	lines := n.logs.lines()
	const most = 150
	if len(lines) > most {
		n.t.Logf("the nodes' last %d of %d log lines:", most, len(lines))
		lines = lines[len(lines)-most:]
	}
	n.t.Log(strings.Join(lines, "\n"))
}

func (n *nodes) stopAll() {
	for m := range n.cancel {
		n.stop(m)
	}
}

// awaitMembersEnded waits until no worker reports tasks of the topology:
// its members have stopped (and run Cleanup, when they stopped
// gracefully).
func (n *nodes) awaitMembersEnded() {
	n.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reports, err := n.statuses.List(context.Background(), n.name)
		if err != nil {
			n.t.Fatal(err)
		}
		running := 0
		for _, cr := range reports {
			if rep, err := workers.DecodeReport(cr); err == nil && rep.Status != nil {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%d workers still report tasks of %s after 10 s", running, n.name)
		}
	}
}

// await polls the submission until ok accepts its state.
func (n *nodes) await(d time.Duration, ok func(state string) bool) string {
	n.t.Helper()
	deadline := time.Now().Add(d)
	for {
		spec, _, err := n.reg.Get(context.Background(), n.name)
		if err != nil && !errors.Is(err, cluster.ErrNotFound) {
			n.t.Fatal(err)
		}
		if ok(spec.State) {
			return spec.State
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the topology is %s after %v", spec.State, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodesRunATopologyExactlyOnceAcrossLeaves runs a keyed count on three
// nodes; two of them leave while it runs (one of them probably the
// leader), so the generation changes twice and every task restores the
// latest checkpoint. The state the topology finishes with counts every
// input once.
func TestNodesRunATopologyExactlyOnceAcrossLeaves(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const count = 3000
		var mu sync.Mutex
		result := map[string]int64{}
		n := startNodesOn(t, c, "eo-nodes", func(map[string]string) (*topology.Topology, error) {
			return checkpointTopology(t, "eo-nodes", count, 3*time.Second, result, &mu), nil
		})
		for _, m := range []string{"n1", "n2", "n3"} {
			n.start(m)
		}
		err := n.reg.Submit(context.Background(), cluster.Spec{Name: "eo-nodes", Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		n.stop("n2")
		time.Sleep(700 * time.Millisecond)
		n.stop("n1")
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
		n.awaitMembersEnded() // Cleanup has run
		n.stopAll()
		mu.Lock()
		defer mu.Unlock()
		expectCounted(t, result, count)
	})
}

// TestKillStopsATopologyAfterItsFinalCheckpoint kills a running topology:
// it stops, nothing is counted twice, and what was counted is a prefix of
// the input that a resubmission with Resume completes exactly.
func TestKillStopsATopologyAfterItsFinalCheckpoint(t *testing.T) {
	eachCoordination(t, func(t *testing.T, c coordination) {
		verifyNoLeaks(t)
		const count = 3000
		var mu sync.Mutex
		result := map[string]int64{}
		n := startNodesOn(t, c, "kill-nodes", func(map[string]string) (*topology.Topology, error) {
			return checkpointTopology(t, "kill-nodes", count, 4*time.Second, result, &mu), nil
		})
		n.start("n1")
		n.start("n2")
		ctx := context.Background()
		if err := n.reg.Submit(ctx, cluster.Spec{Name: "kill-nodes", Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		spec, rev, err := n.reg.Get(ctx, "kill-nodes")
		if err != nil {
			t.Fatal(err)
		}
		spec.State = cluster.StateKilling
		if _, err := n.reg.Update(ctx, spec, rev); err != nil {
			t.Fatal(err)
		}
		n.await(30*time.Second, func(s string) bool { return s == cluster.StateKilled })
		killed, _, err := n.reg.Get(ctx, "kill-nodes")
		if err != nil {
			t.Fatal(err)
		}
		n.awaitMembersEnded() // the members stop after they see it
		mu.Lock()
		counted := len(result)
		for k, c := range result {
			if c != 1 {
				t.Fatalf("%s counted %d times after the kill", k, c)
			}
		}
		clear(result) // the resumed run's state starts from the final checkpoint
		mu.Unlock()
		if counted == 0 || counted == count {
			t.Fatalf("%d of %d counted when killed; the kill should come midway", counted, count)
		}
		if err := n.reg.Submit(ctx, cluster.Spec{Name: "kill-nodes", Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond, Resume: true}); err != nil {
			t.Fatal(err)
		}
		// The killed submission names its final checkpoint (ackflow kill
		// prints it), and the resubmission continues from exactly that one.
		again, _, err := n.reg.Get(ctx, "kill-nodes")
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			if time.Now().After(deadline) {
				t.Fatal("the resubmission's first generation never came")
			}
			g, _, err := n.gens.Current(ctx, "kill-nodes")
			if err == nil && !g.Created.Before(again.Submitted) && g.Reason == "submitted" {
				if killed.LastCheckpoint == 0 || g.RestoreFrom != killed.LastCheckpoint {
					t.Fatalf("killed with last checkpoint %d, resumed from %d", killed.LastCheckpoint, g.RestoreFrom)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
		finished, _, err := n.reg.Get(ctx, "kill-nodes")
		if err != nil {
			t.Fatal(err)
		}
		if finished.LastCheckpoint <= killed.LastCheckpoint {
			t.Fatalf("finished with last checkpoint %d, killed with %d", finished.LastCheckpoint, killed.LastCheckpoint)
		}
		// The members stop, and the counters write their result in
		// Cleanup, once they see the state; stopping the nodes first
		// would crash them (CI once read a result without key 0).
		n.awaitMembersEnded()
		n.stopAll()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("killed after %d of %d; the resubmission finished the rest", counted, count)
		expectCounted(t, result, count)
	})
}

// TestWorkerWithAnotherBuildGetsNoTasks: a worker whose build of the
// topology differs from the leader's runs none of its tasks, says why in
// its report, and the others finish the topology.
func TestWorkerWithAnotherBuildGetsNoTasks(t *testing.T) {
	verifyNoLeaks(t)
	const count = 1000
	var mu sync.Mutex
	result := map[string]int64{}
	good := func(map[string]string) (*topology.Topology, error) {
		return checkpointTopology(t, "versions", count, time.Second, result, &mu), nil
	}
	n := startNodes(t, "versions", good)
	n.start("n1")
	n.start("n2")
	time.Sleep(300 * time.Millisecond) // n1 or n2 leads
	n.build = func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder("versions")
		b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: count}} }, 1).Outputs("n")
		b.Bolt("sink", func() topology.Bolt { return &pass{} }, 1).Input("numbers", topology.Shuffle())
		return build(t, b), nil
	}
	n.start("odd")
	ctx := context.Background()
	if err := n.reg.Submit(ctx, cluster.Spec{Name: "versions", Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	statuses := n.statuses
	deadline := time.Now().Add(30 * time.Second)
	for said := false; !said; {
		reports, err := statuses.List(ctx, "versions")
		if err != nil {
			t.Fatal(err)
		}
		for _, cr := range reports {
			rep, err := workers.DecodeReport(cr)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Member == "odd" && rep.Status != nil {
				t.Fatalf("the worker with another build runs tasks: %+v", rep.Status)
			}
			if rep.Member == "odd" && strings.Contains(rep.Error, "another version") {
				said = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker with another build does not say why it runs nothing: %+v", reports)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	n.awaitMembersEnded() // Cleanup has run
	n.stopAll()
	mu.Lock()
	defer mu.Unlock()
	expectCounted(t, result, count)
}

// TestInMemoryWorkersAnswerPresenceUnderTheirCluster runs a worker of an
// in-memory cluster (a local run's control plane) and probes its
// presence: under its own cluster's ID it answers; under another
// in-memory cluster's, where a local run of another topology on the same
// server has a worker of the same name, it does not, so that run's
// leader would notice at once that its own worker died.
func TestInMemoryWorkersAnswerPresenceUnderTheirCluster(t *testing.T) {
	verifyNoLeaks(t)
	n := startNodesOn(t, inMemory, "presence", func(map[string]string) (*topology.Topology, error) {
		return nil, errors.New("never submitted")
	})
	n.startWith("worker-0", nil)
	n.awaitMembers("worker-0")
	other, err := cluster.NewMemoryCluster(nodeTiming)
	if err != nil {
		t.Fatal(err)
	}
	if other.ID() == n.memory.ID() || len(other.ID()) != 16 {
		t.Fatalf("in-memory cluster IDs %q and %q", n.memory.ID(), other.ID())
	}
	for _, tc := range []struct {
		subject string
		answers bool
	}{
		{"ackflow.presence." + n.memory.ID() + ".worker-0", true},
		{"ackflow.presence." + other.ID() + ".worker-0", false},
		{"ackflow.presence.worker-0", false}, // a cluster on KV buckets
	} {
		_, err := n.nc.Request(tc.subject, nil, time.Second)
		if got := err == nil; got != tc.answers {
			t.Errorf("a probe on %s: %v; want an answer: %v", tc.subject, err, tc.answers)
		}
		if !tc.answers && !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("a probe on %s: %v, want no responders", tc.subject, err)
		}
	}
}
