package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
)

// TestMemoryClusterHandlesShareEntries opens two workers' handles on one
// in-memory cluster: what one writes the other reads, as two processes
// see the same KV buckets, while each keeps its own members alive and its
// own leases.
func TestMemoryClusterHandlesShareEntries(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, err := cluster.NewMemoryCluster(fast)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Open(cluster.MembersConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Open(cluster.MembersConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	watch, err := b.Members.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Members.Join(ctx, cluster.Member{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Members.Join(ctx, cluster.Member{Name: "w2"}); err != nil {
		t.Fatal(err)
	}
	waitSet(t, watch, "w1 w2")
	if err := b.Members.Join(ctx, cluster.Member{Name: "w1"}); !errors.Is(err, cluster.ErrNameTaken) {
		t.Fatalf("a second worker joined under a live member's name: %v", err)
	}
	// Killing is the process's own: b cannot kill a's member, a can.
	if err := b.Members.(*cluster.MemoryMembers).Kill("w1"); err == nil {
		t.Fatal("one worker's handle killed a member another worker keeps alive")
	}
	if err := a.Members.(*cluster.MemoryMembers).Kill("w1"); err != nil {
		t.Fatal(err)
	}
	waitSet(t, watch, "w2")

	if err := a.Registry.Submit(ctx, cluster.Spec{Name: "wc", Guarantee: "at-least-once"}); err != nil {
		t.Fatal(err)
	}
	if spec, _, err := b.Registry.Get(ctx, "wc"); err != nil || spec.Guarantee != "at-least-once" {
		t.Fatalf("the other handle reads %+v, %v", spec, err)
	}
	if _, err := a.Generations.Next(ctx, cluster.Generation{Topology: "wc", Number: 1, Assignment: map[int]string{0: "w2"}}, 0); err != nil {
		t.Fatal(err)
	}
	if g, _, err := b.Generations.Current(ctx, "wc"); err != nil || g.Number != 1 {
		t.Fatalf("the other handle reads generation %+v, %v", g, err)
	}
	if err := a.Statuses.Put(ctx, cluster.Report{Topology: "wc", Member: "w2", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if reports, err := b.Statuses.List(ctx, "wc"); err != nil || len(reports) != 1 {
		t.Fatalf("the other handle lists %v, %v", reports, err)
	}

	led := make(chan string, 2)
	lead := func(name string) func(context.Context) {
		return func(lctx context.Context) {
			led <- name
			<-lctx.Done()
		}
	}
	actx, acancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { a.Elector.Campaign(actx, "wc", "w1", lead("w1")); done <- struct{}{} }()
	if got := <-led; got != "w1" {
		t.Fatalf("%s leads", got)
	}
	go func() { b.Elector.Campaign(ctx, "wc", "w2", lead("w2")); done <- struct{}{} }()
	select {
	case got := <-led:
		t.Fatalf("%s leads beside w1", got)
	case <-time.After(2 * fast.HeartbeatEvery):
	}
	if l, err := b.Elector.Leader(ctx, "wc"); err != nil || l != "w1" {
		t.Fatalf("the other handle sees leader %q, %v", l, err)
	}
	acancel() // w1 resigns; w2 takes over
	if got := <-led; got != "w2" {
		t.Fatalf("%s leads after w1 resigned", got)
	}
	cancel()
	<-done
	<-done
}

func TestMemoryClusterRefusesAnotherExpiry(t *testing.T) {
	c, err := cluster.NewMemoryCluster(fast)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(cluster.MembersConfig{DeadAfter: 2 * fast.DeadAfter})
	if err == nil || !strings.Contains(err.Error(), "expire after") {
		t.Fatalf("a worker with another DeadAfter opened the cluster: %v", err)
	}
}
