package workers_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// TestMembersBeginWhenTheirLeaderStartsAfterThem: a member says "ready"
// when it joins a generation and then once per announce period; a leader
// that subscribes after the members' first "ready" calls for another, so
// the generation begins at once instead of at the next period. With the
// period an hour, the members begin only if the call is answered.
func TestMembersBeginWhenTheirLeaderStartsAfterThem(t *testing.T) {
	defer goleak.VerifyNone(t)
	defer workers.SetAnnounceEvery(time.Hour)()
	srv, err := embednats.Start(embednats.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "late-leader", func() topology.Spout { return &numbers{n: 1000} }, func() topology.Bolt { return &pass{} }, sink)
	cfg := workers.DefaultConfig()
	cfg.NATSURL, cfg.Workers, cfg.DeadLetters = srv.URL(), 2, deadletter.NewMemory()
	refs, err := workers.Tasks(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := workers.Generation{Number: 1, Slots: 2, Assign: make([]int, len(refs))}
	for i := range g.Assign {
		g.Assign[i] = i % 2
	}

	watch, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	var readies atomic.Int32
	if _, err := watch.Subscribe("ackflow.late-leader.gen", func(m *nats.Msg) {
		if strings.HasPrefix(string(m.Data), "ready ") {
			readies.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	var members []*workers.Member
	defer func() {
		for _, m := range members {
			m.Stop()
		}
	}()
	for slot := range 2 {
		m, err := workers.JoinGeneration(ctx, topo, cfg, g, slot, nil)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	// Both have said "ready", and no leader heard it.
	for deadline := time.Now().Add(10 * time.Second); readies.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2 members said ready in 10 s", readies.Load())
		}
	}
	l, err := workers.LeadGeneration(ctx, topo, cfg, g, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, m := range members {
		select {
		case <-m.Begun():
		case <-time.After(20 * time.Second):
			t.Fatalf("slot %d did not begin in 20 s: the leader's call for ready went unanswered (%d readies seen)", m.Slot(), readies.Load())
		}
	}
	// The answers reach this test's own connection on its own schedule,
	// which can come after the members began (a busy machine delayed it
	// in one full run of the package's tests).
	for deadline := time.Now().Add(10 * time.Second); readies.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d readies seen in 10 s; want the 2 first ones and 2 answers to the call", readies.Load())
		}
	}
}

// TestSummaryTimesTheStartAndTheEnd: a run's summary says how long its
// first record took to leave and how long the run went on after its last
// tree completed, both inside the run's duration; at-most-once completes
// no tree, so only the first is measured.
func TestSummaryTimesTheStartAndTheEnd(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	for _, g := range []workers.Guarantee{workers.AtLeastOnce, workers.AtMostOnce} {
		sink := flowtest.NewSink()
		topo := numbersTopology(t, "times", func() topology.Spout { return &numbers{n: 5000} }, func() topology.Bolt { return &pass{} }, sink)
		sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: g, Configure: func(c *workers.Config) { c.NATSURL = srv.URL() }})
		if err != nil {
			t.Fatal(err)
		}
		if sum.FirstRecordAfter <= 0 || sum.FirstRecordAfter >= sum.Duration {
			t.Errorf("%v: first record after %v of a %v run", g, sum.FirstRecordAfter, sum.Duration)
		}
		switch {
		case g == workers.AtMostOnce && sum.EndedAfterLastTree != 0:
			t.Errorf("at-most-once: ended %v after a last tree it does not track", sum.EndedAfterLastTree)
		case g == workers.AtLeastOnce && (sum.EndedAfterLastTree <= 0 || sum.FirstRecordAfter+sum.EndedAfterLastTree >= sum.Duration):
			t.Errorf("at-least-once: first record after %v, ended %v after the last tree, of a %v run", sum.FirstRecordAfter, sum.EndedAfterLastTree, sum.Duration)
		}
	}
}
