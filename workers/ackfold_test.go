package workers

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ackflow/ackflow/acker"
	"github.com/ackflow/ackflow/wire"
)

// TestAcksFold: consecutive ACKs of one tree and holder fold into one
// message, and nothing else does (an INIT, a FAIL, a RESET, another tree or
// another holder in between ends the run). The oracle is the acker: the
// messages as sent one by one and as folded must give the same verdicts,
// tree by tree.
func TestAcksFold(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var sent []wire.AckMsg
	o := &outbox{size: 1 << 20, acks: make([][]wire.AckMsg, 1), isDirty: make([]bool, 1)}
	for tree := uint64(1); tree <= 2000; tree++ {
		// A tree of a root and 1-12 children, acked in runs as a count
		// task acks the words of one line: INIT, the root's ACK, then the
		// children's, some of them from a task holding log entries.
		root := r.Uint64()
		kids := make([]uint64, 1+r.IntN(12))
		xor := uint64(0)
		for i := range kids {
			kids[i] = r.Uint64()
			xor ^= kids[i]
		}
		msgs := []wire.AckMsg{{Type: wire.AckInit, Tree: tree, Val: root, Task: 0}, {Type: wire.AckAck, Tree: tree, Val: root ^ xor, Task: -1}}
		for _, k := range kids {
			holder := int32(-1)
			if r.IntN(3) == 0 {
				holder = 7
			}
			msgs = append(msgs, wire.AckMsg{Type: wire.AckAck, Tree: tree, Val: k, Task: holder})
		}
		switch r.IntN(20) {
		case 0: // failed half way
			msgs = slices.Insert(msgs, len(msgs)/2, wire.AckMsg{Type: wire.AckFail, Tree: tree, Task: 3, Err: "boom"})
		case 1: // a timeout reset half way
			msgs = slices.Insert(msgs, len(msgs)/2, wire.AckMsg{Type: wire.AckReset, Tree: tree, Task: -1})
		case 2: // one ack lost: the tree must stay pending both ways
			msgs = slices.Delete(msgs, len(msgs)-1, len(msgs))
		}
		if tree > 1 && r.IntN(4) == 0 {
			// Another tree's ACK in between: no folding across it.
			other := wire.AckMsg{Type: wire.AckAck, Tree: tree - 1, Val: 0, Task: -1}
			msgs = slices.Insert(msgs, 1+r.IntN(len(msgs)-1), other)
		}
		for _, m := range msgs {
			sent = append(sent, m)
			o.addAck(0, m)
		}
	}
	folded := o.acks[0]
	if len(folded) >= len(sent)*2/3 {
		t.Fatalf("%d messages folded into %d; runs of ACKs of one tree and holder should fold", len(sent), len(folded))
	}
	verdicts := func(msgs []wire.AckMsg) map[uint64][]acker.Verdict {
		tr, err := acker.New(acker.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64][]acker.Verdict{}
		for _, m := range msgs {
			for _, v := range tr.Handle(m, nil) {
				got[v.Tree] = append(got[v.Tree], v)
			}
		}
		return got
	}
	want, got := verdicts(sent), verdicts(folded)
	complete := 0
	for _, vs := range want {
		if vs[len(vs)-1].Type == wire.NoticeComplete {
			complete++
		}
	}
	if complete < 1500 {
		t.Fatalf("only %d of 2000 trees completed one by one; the test's trees are wrong", complete)
	}
	for tree, w := range want {
		if g := got[tree]; !slices.Equal(g, w) {
			t.Errorf("tree %d: verdicts %+v folded, %+v one by one", tree, g, w)
		}
	}
	for tree, g := range got {
		if _, ok := want[tree]; !ok {
			t.Errorf("tree %d: verdicts %+v folded, none one by one", tree, g)
		}
	}
	t.Logf("%d acker messages folded into %d; %d trees completed", len(sent), len(folded), complete)
}
