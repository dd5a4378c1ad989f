package workers_test

import (
	"context"
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

// TestTwoOwnersOfAMovingSlotRunEachFrameOnce holds a moving slot's old
// and new owner subscribed at once, as they are for a moment while each
// follows the move when it hears of it (and for longer when the old owner
// was cut off from the cluster and comes back). The slot holds an
// at-most-once sink, whose writes no fence downstream can take back. The
// spout's worker addresses its frames to the old owner until the new one
// announces itself, then to the new one; each owner must run only the
// frames addressed to it. Both owners stay up throughout, so every record
// reaches the sink exactly once; before frames named their destination's
// owner, every record sent after the move reached it twice.
func TestTwoOwnersOfAMovingSlotRunEachFrameOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const n = 3000
	sink := flowtest.NewSink()
	b := topology.NewBuilder("owners")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n, d: 2 * time.Second} }, 1).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("numbers", topology.Shuffle())
	topo := build(t, b)
	cfg := workers.DefaultConfig()
	cfg.NATSURL, cfg.Workers, cfg.DeadLetters, cfg.Guarantee = srv.URL(), 2, deadletter.NewMemory(), workers.AtMostOnce
	refs, err := workers.Tasks(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The sink's slot (1) moves; everything else runs in slot 0.
	g := workers.Generation{Number: 1, Slots: 2, Assign: make([]int, len(refs))}
	for _, r := range refs {
		if r.Component == "sink" {
			g.Assign[r.ID] = 1
		}
	}
	moved := g
	moved.Incarnations, moved.DiedAt = []uint64{0, 1}, []time.Time{{}, time.Now()}

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	var members []*workers.Member
	defer func() {
		for _, m := range members {
			m.Crash()
		}
	}()
	// join subscribes a member; begin starts those that joined, as a
	// leader does once every slot is ready (a record sent before its
	// receiver subscribed would go to no one).
	join := func(g workers.Generation, slot int) *workers.Member {
		t.Helper()
		m, err := workers.JoinGeneration(ctx, topo, cfg, g, slot, nil)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		return m
	}
	begin := func() {
		t.Helper()
		nc.Publish("ackflow.owners.gen", []byte("begin 1"))
		nc.Flush()
		for _, m := range members {
			select {
			case <-m.Begun():
			case <-time.After(10 * time.Second):
				t.Fatalf("slot %d did not begin in 10 s", m.Slot())
			}
		}
	}
	join(g, 0)
	old := join(g, 1)
	begin()
	waitFor := func(want int, what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); len(sink.Values()) < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				for _, m := range members {
					st := m.Status()
					t.Logf("slot %d, earlier owners %v: %+v, %+v", m.Slot(), m.Generation().Incarnations, st.Components, st.Transport)
				}
				t.Fatalf("%d of %d records reached the sink in 20 s %s", len(sink.Values()), want, what)
			}
		}
	}
	waitFor(n/5, "before the move")
	successor := join(moved, 1)
	begin()
	waitFor(n, "after the move")
	time.Sleep(200 * time.Millisecond) // a record that arrives twice arrives now

	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := range int64(n) {
		if seen[i] != 1 {
			t.Fatalf("record %d reached the sink %d times (%d deliveries in all); want each once", i, seen[i], len(sink.Values()))
		}
	}
	// Both owners ran the sink, and each dropped what the other ran.
	ran := func(m *workers.Member) (executed, fenced int64) {
		st := m.Status()
		for _, c := range st.Components {
			if c.Component == "sink" {
				executed += c.Executed
			}
		}
		return executed, st.Transport.FencedRecords
	}
	oldRan, oldFenced := ran(old)
	newRan, newFenced := ran(successor)
	t.Logf("the old owner ran %d records and dropped %d, the new one ran %d and dropped %d", oldRan, oldFenced, newRan, newFenced)
	if oldRan == 0 || newRan == 0 || oldRan+newRan != n {
		t.Fatalf("the old owner ran %d records, the new one %d; want both some, %d in all", oldRan, newRan, n)
	}
}
