package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/embednats/natstest"
)

var fast = cluster.MembersConfig{HeartbeatEvery: 300 * time.Millisecond, DeadAfter: time.Second}

func TestKVBucketsAreCreatedThenReused(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	open := func(cfg cluster.MembersConfig) {
		t.Helper()
		if _, err := cluster.NewKVMembers(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.NewKVElector(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.NewKVRegistry(ctx, js); err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.NewKVGenerations(ctx, js); err != nil {
			t.Fatal(err)
		}
	}
	// Creates and updates go to the JetStream meta leader, which a NATS
	// cluster re-elects when a server restarts; while it has none such a
	// request gets no answer. Binding to a bucket that is already right
	// must therefore send none.
	writes := natstest.MetaRequests(t, js)
	open(fast)
	if n := writes(); n != 4 {
		t.Errorf("creating the buckets sent %d create or update requests, want 4", n)
	}
	open(fast) // a second worker binds to the same buckets
	if n := writes(); n != 0 {
		t.Errorf("binding to buckets that exist sent %d create or update requests, want none", n)
	}
	checkBucket(t, js, cluster.MembersBucket, time.Second, time.Second)
	checkBucket(t, js, cluster.LeadersBucket, time.Second, time.Second)
	checkBucket(t, js, cluster.TopologiesBucket, 0, 0)
	checkBucket(t, js, cluster.GenerationsBucket, 0, 0)
	// A cluster restarted with other timing updates the TTLs.
	open(cluster.MembersConfig{HeartbeatEvery: time.Second, DeadAfter: 5 * time.Second})
	if n := writes(); n != 2 {
		t.Errorf("new timing sent %d create or update requests, want 2 (the two buckets with a TTL)", n)
	}
	checkBucket(t, js, cluster.MembersBucket, 5*time.Second, 5*time.Second)
	checkBucket(t, js, cluster.LeadersBucket, 5*time.Second, 5*time.Second)
}

func checkBucket(t *testing.T, js jetstream.JetStream, name string, ttl, markers time.Duration) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != ttl || st.LimitMarkerTTL() != markers || st.History() != 1 {
		t.Fatalf("bucket %s: TTL %v, marker TTL %v, history %d; want %v, %v, 1", name, st.TTL(), st.LimitMarkerTTL(), st.History(), ttl, markers)
	}
	if bs := st.(*jetstream.KeyValueBucketStatus); bs.StreamInfo().Config.Storage != jetstream.FileStorage {
		t.Fatalf("bucket %s is not on file storage", name)
	}
}

func TestNewKVRefusesBadConfigAndNoJetStream(t *testing.T) {
	ctx := context.Background()
	if _, err := cluster.NewKVMembers(ctx, nil, cluster.MembersConfig{HeartbeatEvery: time.Second, DeadAfter: time.Second}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("NewKVMembers with DeadAfter < 2 HeartbeatEvery: %v", err)
	}
	if _, err := cluster.NewKVRegistry(ctx, nil); err == nil || !strings.Contains(err.Error(), "jetstream.New") {
		t.Fatalf("NewKVRegistry without JetStream: %v", err)
	}
}

// TestKVExpiryDelay measures what the members' expiry rests on: how long
// after a key's last write a watcher of a bucket with a TTL of DeadAfter
// sees the key go.
func TestKVExpiryDelay(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := cluster.NewKVMembers(ctx, js, fast); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, cluster.MembersBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range 3 {
		key := []string{"a", "b", "c"}[i]
		written := time.Now()
		if _, err := kv.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		for e := range w.Updates() {
			if e.Key() == key && e.Operation() == jetstream.KeyValuePurge {
				took := time.Since(written)
				t.Logf("key %s: expiry marker %v after its only write (TTL %v)", key, took, fast.DeadAfter)
				if took < fast.DeadAfter || took > fast.DeadAfter+2*time.Second {
					t.Fatalf("key %s expired %v after its write, want between the TTL and 2 s more", key, took)
				}
				break
			}
		}
	}
}

// TestKVMemberLostToAnotherProcess: two processes (two connections) named
// w1. The second is refused while the first lives; once the first's entry
// expires (its heartbeats paused), the second joins, and when the first
// resumes it finds the name taken: it stops and reports, and does not
// overwrite the second.
func TestKVMemberLostToAnotherProcess(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first process leaves when it learns that it lost, as a worker
	// does on its way out: Leave from OnLost must neither block nor remove
	// the second process's entry.
	lost := make(chan error, 1)
	left := make(chan error, 1)
	var a *cluster.KVMembers
	cfgA := fast
	cfgA.OnLost = func(m cluster.Member, err error) {
		lost <- err
		left <- a.Leave(context.Background(), m.Name)
	}
	a, closeA := connectMembers(t, srv, cfgA)
	defer closeA()
	b, closeB := connectMembers(t, srv, fast)
	defer closeB()

	if err := a.Join(ctx, cluster.Member{Name: "w1", PID: 100, Host: "alpha"}); err != nil {
		t.Fatal(err)
	}
	err = b.Join(ctx, cluster.Member{Name: "w1", PID: 200, Host: "beta"})
	if !errors.Is(err, cluster.ErrNameTaken) || !strings.Contains(err.Error(), "pid 100 on alpha") {
		t.Fatalf("the second process's Join returned %v, want ErrNameTaken naming pid 100 on alpha", err)
	}
	if err := a.Pause("w1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fast.DeadAfter+3*time.Second, "w1 to expire", func() bool {
		members, err := b.List(ctx)
		return err == nil && len(members) == 0
	})
	if err := b.Join(ctx, cluster.Member{Name: "w1", PID: 200, Host: "beta"}); err != nil {
		t.Fatalf("Join of the expired name: %v", err)
	}
	if err := a.Resume("w1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, cluster.ErrNameTaken) || !strings.Contains(err.Error(), "pid 200 on beta") {
			t.Fatalf("OnLost got %v, want ErrNameTaken naming pid 200 on beta", err)
		}
	case <-time.After(fast.HeartbeatEvery + 2*time.Second):
		t.Fatalf("the resumed first process was not told it lost its name")
	}
	select {
	case err := <-left:
		if err != nil {
			t.Fatalf("Leave from OnLost: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("Leave from OnLost blocked")
	}
	time.Sleep(2 * fast.HeartbeatEvery)
	members, err := b.List(ctx)
	if err != nil || len(members) != 1 || members[0].PID != 200 {
		t.Fatalf("List = %+v, %v; want the second process's w1 only", members, err)
	}
}

// connectMembers is a worker process's view: a connection of its own.
// The caller defers closing it, after deferring goleak.VerifyNone.
func connectMembers(t *testing.T, srv *embednats.Server, cfg cluster.MembersConfig) (*cluster.KVMembers, func()) {
	t.Helper()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	m, err := cluster.NewKVMembers(context.Background(), js, cfg)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return m, nc.Close
}

// TestKVWatchClosesWhenTheConnectionCloses checks what the Watch methods
// promise: a broken watch closes its channel, so the receiver can tell.
func TestKVWatchClosesWhenTheConnectionCloses(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := natstest.JetStream(t)
	defer stop()
	nc := js.Conn()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := cluster.NewKVRegistry(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := r.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case _, open := <-ch:
		if open {
			t.Fatalf("the watch of an empty registry sent an event")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the watch stayed open after its connection closed")
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKVListsWithoutAConsumer checks that listing a bucket asks only the
// bucket's stream, never the JetStream meta leader, so that ackflow status
// and list work while a NATS cluster re-elects it; and that a list holds
// the live keys only.
func TestKVListsWithoutAConsumer(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	reg, err := cluster.NewKVRegistry(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cluster.NewKVStatuses(ctx, js, fast)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c", "a", "b", "gone"} {
		if err := reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-least-once", State: cluster.StateRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"w2", "w1"} {
		if err := st.Put(ctx, cluster.Report{Topology: "c", Member: m, Data: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	meta := natstest.MetaRequests(t, js)
	specs, err := reg.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "a b c" {
		t.Errorf("the registry lists %q, want the live submissions a b c", names)
	}
	reports, err := st.List(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 || reports[0].Member != "w1" || string(reports[1].Data) != "w2" {
		t.Errorf("reports %+v, want w1's and w2's", reports)
	}
	if n := meta(); n != 0 {
		t.Errorf("listing sent %d requests that only the meta leader answers, want none", n)
	}
	// A report expires with its writer's heartbeats (TTL DeadAfter).
	time.Sleep(fast.DeadAfter + 1500*time.Millisecond)
	if reports, err = st.List(ctx, "c"); err != nil || len(reports) != 0 {
		t.Errorf("after the TTL: %d reports (%v), want none", len(reports), err)
	}
}
