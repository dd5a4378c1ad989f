package workers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// A local run's nodes share one process: a heartbeat comes late only when
// the process is busy, and must not pass for a death. Once it did (CI,
// the overload test under the race detector): the leader moved the
// spout's slot to the other node, and without checkpoints the spout
// started its source again while the trees its first instance had in
// flight were dropped with it.

// openCounted is numbers that counts its instances.
type openCounted struct {
	numbers
	opens *atomic.Int64
}

func (s *openCounted) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.opens.Add(1)
	return s.numbers.Open(tc, out)
}

// TestLocalRunTakesNoBusyNodeForDead stops the heartbeats of the node
// that holds the spout for eight times DeadAfter in the middle of a run
// without checkpoints, as a busy process delays them: nothing moves, the
// spout opens once, and every record reaches the sink once.
func TestLocalRunTakesNoBusyNodeForDead(t *testing.T) {
	const n = 20_000
	var opens atomic.Int64
	sink := flowtest.NewSink()
	b := topology.NewBuilder("busy")
	// 8 s of numbers: the pause (4 s from about 0.8 s) ends well before.
	b.Spout("numbers", func() topology.Spout { return &openCounted{numbers{n: n, d: 8 * time.Second}, &opens} }, 1).Outputs("n")
	b.Bolt("pass", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", func() topology.Bolt { return sink.Bolt() }, 1).Input("pass", topology.Shuffle())
	var logs testbuf.Buffer
	paused := make(chan error, 1)
	logger := workers.NewLogger(&logs, zerolog.WarnLevel)
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   2,
		Logger:    &logger,
		Configure: func(c *workers.Config) {
			workers.OnInProcessCluster(c, func(pause func(int, time.Duration) error) {
				// The first node holds the spout (round-robin placement).
				go func() {
					for len(sink.Values()) < n/10 {
						time.Sleep(5 * time.Millisecond)
					}
					paused <- pause(0, 8*c.DeadAfter)
				}()
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("the run ended before the heartbeats were paused and resumed; the run's warnings:\n%s", logs.String())
	}
	if got := opens.Load(); got != 1 || sum.Component("numbers").Failed > 0 {
		t.Fatalf("the spout opened %d times (want 1) and failed %d trees; the run's warnings:\n%s", got, sum.Component("numbers").Failed, logs.String())
	}
	expectSink(t, sink, n, 1)
}
