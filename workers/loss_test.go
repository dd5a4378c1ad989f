package workers_test

import (
	"context"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// TestLostFramesAreResentNotTimedOut loses data, acker and notice frames
// with the production message timeout of 30 s. Loss recovery must resend
// them: no tree may wait for the timeout and nothing needs replaying, so
// the run ends long before a single timeout could have passed, with every
// record delivered.
func TestLostFramesAreResentNotTimedOut(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 20000
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("resend")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n} }, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("pre", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("tally", topology.Global())
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
		Guarantee:      workers.AtLeastOnce,
		Workers:        3,
		Chaos:          chaos.Config{Drop: 0.05, Dup: 0.01, Reorder: 0.05, Seed: 31},
		MessageTimeout: 30 * time.Second,
		Configure:      func(c *workers.Config) { c.BatchSize = 64 },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; dropped %d frames; %d NACKs, %d resent", sum.Duration, sum.Chaos.FramesDropped, sum.NACKs, sum.Resent)
	if sum.Chaos.FramesDropped == 0 || sum.NACKs == 0 || sum.Resent == 0 {
		t.Fatalf("dropped %d frames, %d NACKs, %d resent: the test proves nothing", sum.Chaos.FramesDropped, sum.NACKs, sum.Resent)
	}
	spout := sum.Component("numbers")
	if spout.TimedOut != 0 || spout.Replayed != 0 || sum.LostFrames != 0 {
		t.Fatalf("%d trees timed out, %d roots replayed, %d lost frames given up on; loss recovery should have resent them all",
			spout.TimedOut, spout.Replayed, sum.LostFrames)
	}
	tally.expect(t, "tally", n, 1)
	expectSink(t, sink, n, 1)
}

// TestLostLastFrameIsNoticed loses only frames of the spout, most of them,
// in runs so short that the lost frame is often the last one a receiver
// would ever get: only the sender's high-water mark reveals it.
func TestLostLastFrameIsNoticed(t *testing.T) {
	defer goleak.VerifyNone(t)
	nacked := 0
	for seed := uint64(1); seed <= 10; seed++ {
		sink := flowtest.NewSink()
		topo := numbersTopology(t, "last", func() topology.Spout { return &numbers{n: 30} }, func() topology.Bolt { return &pass{} }, sink)
		sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
			Guarantee:      workers.AtLeastOnce,
			Chaos:          chaos.Config{Drop: 0.3, Seed: seed},
			MessageTimeout: 20 * time.Second,
			Configure:      func(c *workers.Config) { c.ChaosComponents = []string{"numbers"} },
		})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Component("numbers").TimedOut != 0 {
			t.Fatalf("seed %d: a lost frame waited for the message timeout", seed)
		}
		exactlyOnceEach(t, sink, 30)
		if sum.NACKs > 0 {
			nacked++
		}
	}
	// Each run sends one data frame to each task of mid: a receiver that
	// lost it never sees a gap in the frames, only the high-water mark.
	if nacked == 0 {
		t.Fatal("no run lost a frame; the test proves nothing")
	}
	t.Logf("%d of 10 runs lost a last frame and recovered it", nacked)
}

// TestControlFramesAreNeverDropped floods the smallest inboxes with acker
// messages and notices. Before control frames had their own path they were
// dropped when an inbox was full, and the trees waited for the timeout.
func TestControlFramesAreNeverDropped(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, k = 2000, 20
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("control")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n} }, 1).Outputs("n")
	b.Bolt("fan", func() topology.Bolt { return &fanOut{k: k} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, 2).Input("fan", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 2).Input("tally", topology.Shuffle())
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
		Guarantee:      workers.AtLeastOnce,
		Workers:        2,
		MessageTimeout: 30 * time.Second,
		Configure: func(c *workers.Config) {
			c.QueueSize = 2
			c.BatchSize = 1 // a frame per acker message: as many control frames as possible
			c.Ackers = 1
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if spout := sum.Component("numbers"); spout.TimedOut != 0 || spout.Replayed != 0 {
		t.Fatalf("%d trees timed out, %d replayed: control frames were lost", spout.TimedOut, spout.Replayed)
	}
	tally.expect(t, "tally", n*k, 1)
	expectSink(t, sink, n*k, 1)
}
