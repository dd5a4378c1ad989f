package workers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// TestGarbageOnControlSubjectsIsCountedAndDropped publishes messages that
// do not parse on a run's control and checkpoint-reply subjects,
// and an oversized one to a task, while the run takes checkpoints: each is
// counted as a bad frame and dropped, the run goes on, and every record
// arrives once.
func TestGarbageOnControlSubjectsIsCountedAndDropped(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const n = 20000
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "hostile", func() topology.Spout { return &rewindable{numbers{n: n, d: 1500 * time.Millisecond}} },
		func() topology.Bolt { return &pass{} }, sink)
	control := [][]byte{nil, []byte("bp"), []byte("bp x"), []byte("bp 99"), []byte("bp -1"), []byte("bpoff"), []byte("bpoff x"), []byte("bpoff 7"), []byte("bplog"), []byte("bplog x"), []byte("bplog 99"), []byte("dead 0"), []byte("dead 0 x 1 2"),
		[]byte("ckpt"), []byte("ckpt pause x 1"), []byte("ckpt explode 1 1"), []byte("zzz 0"), bytes.Repeat([]byte("x "), 50_000)}
	replies := [][]byte{nil, []byte("{"), []byte("not json"), bytes.Repeat([]byte{0xff}, 300)}
	oversized := bytes.Repeat([]byte{0xa5}, 1<<20)

	flowing, progress := untilRecordsFlow()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		// Once records flow, every task has subscribed.
		select {
		case <-flowing:
		case <-time.After(30 * time.Second):
			t.Error("no record flowed in 30 s")
			return
		}
		for _, m := range control {
			nc.Publish("ackflow.hostile.ctl", m)
		}
		for _, m := range replies {
			nc.Publish("ackflow.hostile.ckpt", m)
		}
		nc.Publish("ackflow.hostile.task.1", oversized)
		nc.Flush()
	}()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Workers: 2, Configure: func(c *workers.Config) {
		c.NATSURL = srv.URL()
		c.CheckpointEvery = 100 * time.Millisecond
		progress(c)
	}})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Every worker reads the control subject; the coordinator the
	// checkpoint replies; one task the oversized frame.
	want := int64(2*len(control) + len(replies) + 1)
	if sum.BadFrames < want {
		t.Fatalf("counted %d bad frames, published %d that do not parse", sum.BadFrames, want)
	}
	if sum.Checkpoints.Taken == 0 {
		t.Fatal("no checkpoint completed: the garbage may have stopped them")
	}
	exactlyOnceEach(t, sink, n)
}

// TestParallelismOutOfBoundsIsRefused: a parallelism from outside (the
// command line, a submission) names a component and stays within
// topology.MaxParallelism, or the run is refused with what to use.
func TestParallelismOutOfBoundsIsRefused(t *testing.T) {
	topo := numbersTopology(t, "bounds", func() topology.Spout { return &numbers{n: 10} }, func() topology.Bolt { return &pass{} }, flowtest.NewSink())
	for _, c := range []struct {
		par  map[string]int
		want string
	}{
		{map[string]int{"mid": topology.MaxParallelism + 1}, "use 1 to 1024"},
		{map[string]int{"mid": 0}, "at least 1"},
		{map[string]int{"nosuch": 2}, "not a component"},
	} {
		cfg := workers.DefaultConfig()
		cfg.Parallelism = c.par
		if _, err := workers.RunLocal(context.Background(), topo, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parallelism %v: %v; want an error saying %q", c.par, err, c.want)
		}
	}
}

// TestGarbageInTheClusterKV writes entries no ackflow program writes into
// every bucket of the cluster while two nodes run a topology
// at-least-once: garbage, truncated JSON, an oversized value, members
// whose name is not their key, a generation of another topology and a
// stale one over the running topology's own generation, a spec that is
// not one. The nodes keep running, the leader writes a new generation
// over each invalid one, the topology finishes, and every record arrives.
func TestGarbageInTheClusterKV(t *testing.T) {
	verifyNoLeaks(t)
	const count = 6000
	sink := flowtest.NewSink()
	n := startNodes(t, "kvgarbage", func(map[string]string) (*topology.Topology, error) {
		return numbersTopology(t, "kvgarbage", func() topology.Spout { return &rewindable{numbers{n: count, d: 3 * time.Second}} },
			func() topology.Bolt { return &pass{} }, sink), nil
	})
	n.start("n1")
	n.start("n2")
	ctx := context.Background()
	if err := n.reg.Submit(ctx, cluster.Spec{Name: "kvgarbage", Guarantee: "at-least-once"}); err != nil {
		t.Fatal(err)
	}
	n.await(30*time.Second, func(s string) bool { return s == cluster.StateRunning })
	time.Sleep(500 * time.Millisecond)
	js, err := jetstream.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	put := func(bucket, key string, value []byte) {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		if _, err := kv.Put(ctx, key, value); err != nil {
			t.Fatalf("put %s/%s: %v", bucket, key, err)
		}
	}
	garbage := [][]byte{nil, []byte("{"), []byte("not json"), bytes.Repeat([]byte{0xff}, 300), bytes.Repeat([]byte("x"), 512<<10), []byte(`{"version":99}`)}
	for i, g := range garbage {
		for _, b := range []string{cluster.MembersBucket, cluster.TopologiesBucket, cluster.GenerationsBucket, cluster.PositionsBucket} {
			put(b, fmt.Sprintf("intruder%d", i), g)
		}
	}
	specs, err := n.reg.List(ctx)
	if !errors.Is(err, cluster.ErrInvalidEntry) || !strings.Contains(err.Error(), "intruder0") || len(specs) != 1 || specs[0].Name != "kvgarbage" {
		t.Fatalf("List with invalid entries: %+v, %v; want the running topology and an error naming the others", specs, err)
	}
	put(cluster.MembersBucket, "n3", []byte(`{"name":"someone-else"}`))
	put(cluster.MembersBucket, "n4", []byte(`{"name":"n4","started":"yesterday"}`))
	cur, err := js.KeyValue(ctx, cluster.GenerationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cur.Get(ctx, "kvgarbage")
	if err != nil {
		t.Fatal(err)
	}
	var gen map[string]any
	if err := json.Unmarshal(e.Value(), &gen); err != nil {
		t.Fatal(err)
	}
	gen["topology"] = "other"
	other, _ := json.Marshal(gen)
	gen["topology"], gen["number"] = "kvgarbage", 0
	stale, _ := json.Marshal(gen)
	gens, err := cluster.NewKVGenerations(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Each over the running topology's own generation: the leader must
	// write a valid one over it, numbered above it.
	for _, bad := range [][]byte{other, stale, []byte("garbage")} {
		rev, err := cur.Put(ctx, "kvgarbage", bad)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			g, _, err := gens.Current(ctx, "kvgarbage")
			if err == nil && g.Number > rev {
				if g.Reason != "the generation entry was invalid" {
					t.Fatalf("generation %d over the invalid entry says %q", g.Number, g.Reason)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no valid generation over the invalid entry %q at revision %d after 10 s: %+v, %v", bad, rev, g, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	n.awaitMembersEnded() // Cleanup has run
	n.stopAll()
	// Each new generation restarts the topology at-least-once (no
	// checkpoints): records arrive again, none may be missing.
	expectSinkAll(t, sink, count)
}
