package cluster_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
)

// statusesCase checks Put, List and expiry against one Statuses.
func statusesCase(t *testing.T, s cluster.Statuses) {
	ctx := context.Background()
	for _, r := range []cluster.Report{
		{Topology: "wc", Member: "w2", Data: []byte("b")},
		{Topology: "wc", Member: "w1", Data: []byte("a")},
		{Topology: "wc2", Member: "w1", Data: []byte("other topology")},
		{Topology: "wc", Member: "w1", Data: []byte("a2")}, // replaces
	} {
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.List(ctx, "wc")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Member != "w1" || string(got[0].Data) != "a2" || got[1].Member != "w2" {
		t.Fatalf("List(wc) = %+v, want w1=a2 and w2=b", got)
	}
	if err := s.Put(ctx, cluster.Report{Topology: "a.b", Member: "w1"}); err == nil {
		t.Fatal("a topology name with a dot was accepted")
	}
	// Reports that are not renewed expire.
	deadline := time.Now().Add(fast.DeadAfter + 3*time.Second)
	for {
		got, err := s.List(ctx, "wc")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports still listed %v after their last write: %+v", fast.DeadAfter+3*time.Second, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMemoryStatuses(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, err := cluster.NewMemoryStatuses(fast)
	if err != nil {
		t.Fatal(err)
	}
	statusesCase(t, s)
}

func TestKVStatuses(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	s, err := cluster.NewKVStatuses(context.Background(), js, fast)
	if err != nil {
		t.Fatal(err)
	}
	statusesCase(t, s)
	// Tools read the workers' timing, so that opening a bucket leaves its
	// TTL alone.
	if _, err := cluster.NewKVMembers(context.Background(), js, fast); err != nil {
		t.Fatal(err)
	}
	got, err := cluster.Timing(context.Background(), js)
	if err != nil || got.DeadAfter != fast.DeadAfter {
		t.Fatalf("Timing = %+v, %v; want DeadAfter %v", got, err, fast.DeadAfter)
	}
}
