package workers_test

// A bolt's ACK of an input can ride on one of the input's children while
// that child still waits in the bolt's outbox (boltExec.Ack): these tests
// check that it loses nothing, under faults and when the child has left.

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ackflow/ackflow/acker"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// TestRiddenAckKeepsTheTreeOpenUntilEveryChildIsAcked checks the algebra
// with the acker as the oracle. A bolt input with edge e has children
// c1..cn; its ACK (e ^ c1 ^ ... ^ cn) is folded into the anchor of one
// child instead of being sent. Whatever order the children are acked in,
// the tree must complete with the last of them and not before, and never
// when one child's ACK is lost.
func TestRiddenAckKeepsTheTreeOpenUntilEveryChildIsAcked(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for tree := uint64(1); tree <= 20000; tree++ {
		tr, err := acker.New(acker.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		e := r.Uint64() | 1
		kids := make([]uint64, 1+r.IntN(6))
		ack := e
		for i := range kids {
			kids[i] = r.Uint64() | 1
			ack ^= kids[i]
		}
		kids[r.IntN(len(kids))] ^= ack // the carrier
		if v := tr.Handle(wire.AckMsg{Type: wire.AckInit, Tree: tree, Val: e, Task: 0}, nil); len(v) != 0 {
			t.Fatalf("tree %d: the INIT alone gave %+v", tree, v)
		}
		r.Shuffle(len(kids), func(i, j int) { kids[i], kids[j] = kids[j], kids[i] })
		lose := len(kids) > 1 && r.IntN(4) == 0
		if lose {
			kids = kids[1:]
		}
		for i, k := range kids {
			v := tr.Handle(wire.AckMsg{Type: wire.AckAck, Tree: tree, Val: k, Task: -1}, nil)
			last := i == len(kids)-1 && !lose
			if last != (len(v) == 1 && v[0].Type == wire.NoticeComplete) || len(v) > 1 {
				t.Fatalf("tree %d of %d children (one lost: %v): after %d ACKs the acker said %+v", tree, len(kids), lose, i+1, v)
			}
		}
	}
}

// TestAcksRideOnChildrenUnderFaults: stateless bolts that emit and ack
// (whose ACKs ride), in front of a stateful one, under every kind of frame
// fault, failed inputs and worker crashes. Each value must reach the
// stateful bolt's user code and the sink exactly once.
func TestAcksRideOnChildrenUnderFaults(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, k = 1500, 3
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("ack-rides")
	b.Spout("numbers", paced(n, 2*time.Second), 1).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: k} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("copy", func() topology.Bolt { return &pass{} }, 2).Input("fan", topology.All()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("copy", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("tally", topology.Global())
	sum := runShape(t, build(t, b), rough(31, 0.05, 0.01))
	tally.expect(t, "tally", n*k, 2)
	expectSink(t, sink, n*k, 2)
	if sum.AckRides == 0 {
		t.Fatal("no ACK rode on a child; the test proves nothing")
	}
	t.Logf("%d ACKs rode on children, %d acker messages", sum.AckRides, sum.AckMessages)
}

// pairs acks its inputs two at a time: it holds an input until the next
// arrives, then emits a child of each and acks both, so the first ACK
// comes in a later Execute than the input's arrival. Run with one task.
type pairs struct {
	out  topology.Collector
	held *topology.Tuple
}

func (p *pairs) Prepare(_ topology.TaskContext, out topology.Collector) error {
	p.out = out
	return nil
}

func (p *pairs) Execute(in *topology.Tuple) {
	if p.held == nil {
		p.held = in
		return
	}
	first := p.held
	p.held = nil
	p.out.Emit(first, first.Values)
	p.out.Emit(in, in.Values)
	p.out.Ack(first)
	p.out.Ack(in)
}

func (p *pairs) Cleanup() error { return nil }

// TestAcksRideOnlyOnChildrenNotYetSent: with batches of one record every
// child leaves the outbox as it is emitted, so no ACK may ride and every
// tree completes through ordinary ACKs; with the default batches the ACKs
// ride. Either way every record arrives once and no tree times out.
func TestAcksRideOnlyOnChildrenNotYetSent(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 2000 // even: pairs holds none at the end
	for _, batch := range []int{1, 512} {
		sink := flowtest.NewSink()
		b := topology.NewBuilder("pairs")
		b.Spout("numbers", paced(n, 500*time.Millisecond), 1).Outputs("n")
		b.Bolt("pairs", func() topology.Bolt { return &pairs{} }, 1).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("sink", sink.Bolt, 2).Input("pairs", topology.Shuffle())
		sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
			Guarantee: workers.AtLeastOnce,
			Workers:   2,
			Configure: func(c *workers.Config) { c.BatchSize = batch },
		})
		if err != nil {
			t.Fatal(err)
		}
		expectSink(t, sink, n, 1)
		spout := sum.Component("numbers")
		if spout.Acked != n || spout.Replayed != 0 || spout.TimedOut != 0 {
			t.Fatalf("batch %d: %d roots acked, %d replayed, %d timed out; want %d, 0, 0", batch, spout.Acked, spout.Replayed, spout.TimedOut, n)
		}
		switch {
		case batch == 1 && sum.AckRides != 0:
			t.Fatalf("batches of one record: %d ACKs rode on children already sent", sum.AckRides)
		case batch > 1 && sum.AckRides == 0:
			t.Fatalf("batches of %d: no ACK rode on a child; the test proves nothing", batch)
		}
		t.Logf("batch %d: %d ACKs rode, %d acker messages", batch, sum.AckRides, sum.AckMessages)
	}
}
