package workers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
)

// TestMarksWaitForQuiet checks the schedule of a sender's high-water marks:
// none while frames to a destination keep coming (the next frame reveals a
// gap), the first about probeQuiet after the last frame, then maxProbes in
// all at doubling intervals, the last about 5 s after the frame, and none
// after that until the next frame.
func TestMarksWaitForQuiet(t *testing.T) {
	m := newMarks(3)
	t0 := time.Unix(1000, 0)
	var sent []time.Duration // since the last frame, for destination 1
	var others int
	look := func(at time.Duration) {
		m.look(t0.Add(at), func(dst int) {
			if dst != 1 {
				others++
				return
			}
			sent = append(sent, at)
		})
	}
	// Frames every 2 ms for 100 ms, looks every millisecond.
	var at time.Duration
	for ; at < 100*time.Millisecond; at += time.Millisecond {
		if at%(2*time.Millisecond) == 0 {
			m.again(1)
		}
		look(at)
	}
	if len(sent) != 0 {
		t.Fatalf("marks sent while frames flowed: at %v", sent)
	}
	last := at - 2*time.Millisecond // the last frame
	for ; at < last+10*time.Second; at += time.Millisecond {
		look(at)
	}
	if others != 0 {
		t.Errorf("%d marks to destinations that never got a frame", others)
	}
	if len(sent) != maxProbes {
		t.Fatalf("%d marks after the last frame, want %d: %v", len(sent), maxProbes, sent)
	}
	if first := sent[0] - last; first < probeQuiet || first > probeQuiet+2*probeEvery {
		t.Errorf("first mark %v after the last frame, want about %v", first, probeQuiet)
	}
	for i := 1; i < len(sent); i++ {
		gap, want := sent[i]-sent[i-1], probeQuiet<<i
		if gap < want || gap > want+probeEvery {
			t.Errorf("mark %d came %v after mark %d, want %v", i, gap, i-1, want)
		}
	}
	if end := sent[len(sent)-1] - last; end < 4*time.Second || end > 6*time.Second {
		t.Errorf("last mark %v after the last frame, want about 5 s (the resend ring keeps %v)", end, resendKeepFor)
	}
	if len(m.probing) != 0 {
		t.Errorf("destinations %v still probed after their last mark", m.probing)
	}

	// A new frame starts the marks again; a look sooner than probeEvery
	// after the last does nothing.
	m.again(1)
	sent = nil
	look(at)
	look(at + probeQuiet)
	look(at + probeQuiet + probeEvery/2)
	if len(sent) != 1 || sent[0] != at+probeQuiet {
		t.Fatalf("after a new frame: marks at %v, want one at %v", sent, at+probeQuiet)
	}
}

// TestFlushHold checks when an idle spout flushes its partial frames: at
// once after a quiet spell, held until spoutHold has passed since the last
// flush that sent something when the spout emits again sooner, and never
// held with nothing to send (which must not count as a flush either).
func TestFlushHold(t *testing.T) {
	var h flushHold
	t0 := time.Unix(1000, 0)
	if w := h.wait(t0, true); w != 0 {
		t.Fatalf("the first partial frame was held %v", w)
	}
	if w := h.wait(t0.Add(spoutHold/5), true); w != spoutHold*4/5 {
		t.Fatalf("a partial frame %v after a flush: held %v, want %v", spoutHold/5, w, spoutHold*4/5)
	}
	h.flushed(t0.Add(spoutHold))
	for _, at := range []time.Duration{spoutHold + 1, spoutHold * 3 / 2} {
		if w := h.wait(t0.Add(at), false); w != 0 {
			t.Fatalf("nothing to send at %v: held %v", at, w)
		}
	}
	if w := h.wait(t0.Add(spoutHold*3/2), true); w != spoutHold/2 {
		t.Fatalf("after the timer's flush at %v: held %v, want %v", spoutHold, w, spoutHold/2)
	}
	if w := h.wait(t0.Add(2*spoutHold), true); w != 0 {
		t.Fatalf("a partial frame %v after the last flush was held %v", spoutHold, w)
	}
	if w := h.wait(t0.Add(10*spoutHold), true); w != 0 {
		t.Fatalf("after a quiet spell: held %v", w)
	}
}

// TestRenackBacksOff: the wait between NACKs of one gap doubles up to
// maxRenack, so that the default ten NACKs span a NATS reconnect (seconds)
// but stay within the 5 s a sender keeps its frames.
func TestRenackBacksOff(t *testing.T) {
	c := lossConfig{renack: 20 * time.Millisecond, maxNacks: 10}
	var total time.Duration
	for n := 1; n < c.maxNacks; n++ {
		w := c.renackAfter(n)
		if w < c.renack || w > maxRenack || (n > 1 && w < c.renackAfter(n-1)) {
			t.Fatalf("wait after NACK %d is %v", n, w)
		}
		total += w
	}
	if total < 2*time.Second || total > resendKeepFor {
		t.Fatalf("ten NACKs span %v, want between 2 s and %v", total, resendKeepFor)
	}
	if w := c.renackAfter(60); w != maxRenack {
		t.Fatalf("wait after 60 NACKs is %v, want %v", w, maxRenack)
	}
}

// TestOutboxTellsAMovedSlotWhereItsFramesStart: once a destination's slot
// has a new owner, a sender's next frame to it comes after a LinkStart
// naming the sequence number the sender had reached, repeated on the
// high-water marks' schedule; a destination whose slot did not move gets
// none.
func TestOutboxTellsAMovedSlotWhereItsFramesStart(t *testing.T) {
	b := topology.NewBuilder("starts")
	b.Spout("s", func() topology.Spout { return nil }, 1).Outputs("n")
	b.Bolt("b", func() topology.Bolt { return nil }, 2).Input("s", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Workers = 3
	p, err := newPlan(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, moved, stayed := p.compTasks["s"][0], p.compTasks["b"][0], p.compTasks["b"][1]
	for i := range p.assign {
		p.assign[i] = 0
	}
	p.assign[moved], p.assign[stayed] = 1, 2
	r := newRun(topo, p, cfg)
	w := &Worker{r: r, slot: 0, incarnation: FrameEpoch(1, 0), epochs: make([]atomic.Uint64, 3), tasks: make([]*task, len(p.tasks)), recordLimit: 1 << 20}
	for i := range w.epochs {
		w.epochs[i].Store(FrameEpoch(1, 0))
	}
	o := newOutbox(context.Background(), w, src)
	type sent struct {
		dst int
		f   *wire.Frame
	}
	var out []sent
	o.link = chaos.NewLink(chaos.Config{}, src, func(dst int, f *wire.Frame) { out = append(out, sent{dst, f}) }, &r.chaosCnt)
	starts := func(dst int) (msgs []wire.LinkMsg) {
		for _, s := range out {
			for _, l := range s.f.Links {
				if s.dst == dst && l.Type == wire.LinkStart {
					msgs = append(msgs, l)
				}
			}
		}
		return msgs
	}
	for range 3 {
		o.send(moved, &wire.Frame{Kind: wire.KindData})
		o.send(stayed, &wire.Frame{Kind: wire.KindData})
	}
	if got := append(starts(moved), starts(stayed)...); len(got) != 0 {
		t.Fatalf("LinkStart %+v before any slot moved", got)
	}
	w.raiseEpoch(1, FrameEpoch(1, 1))
	out = out[:0]
	o.send(moved, &wire.Frame{Kind: wire.KindData})
	o.send(stayed, &wire.Frame{Kind: wire.KindData})
	want := wire.LinkMsg{Type: wire.LinkStart, Epoch: w.incarnation, Seq: 3}
	if len(out) != 3 || out[0].dst != moved || len(out[0].f.Links) != 1 || out[0].f.Links[0] != want || out[1].f.Seq != 4 {
		t.Fatalf("after the move the frames were %+v; want %+v to %d, then frame 4", out, want, moved)
	}
	for at := time.Duration(0); at < 10*time.Second; at += time.Millisecond {
		o.probe(time.Now().Add(at))
	}
	if got := starts(moved); len(got) != maxProbes {
		t.Fatalf("%d LinkStarts to the moved task, want %d", len(got), maxProbes)
	}
	if got := starts(stayed); len(got) != 0 {
		t.Fatalf("LinkStart %+v to a task whose slot did not move", got)
	}
	o.send(moved, &wire.Frame{Kind: wire.KindData})
	if got := starts(moved); len(got) != maxProbes {
		t.Fatalf("a LinkStart after the repeats were done: %d", len(got))
	}
}
