package workers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// TestBoltFactoriesRunPerPlanNotPerLeaderRound counts the calls of a bolt's
// factory in a local run of a second. A plan calls every bolt's factory
// once (a probe instance: is it Stateful, Transactional?) and each task
// once more; the run's leader decides every 5 ms, and it built the plan
// every time: 200 calls a second of a factory the user expects to run
// per task.
func TestBoltFactoriesRunPerPlanNotPerLeaderRound(t *testing.T) {
	const n = 2_000
	var made atomic.Int64
	sink := flowtest.NewSink()
	b := topology.NewBuilder("factories")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n, d: time.Second} }, 1).Outputs("n")
	b.Bolt("pass", func() topology.Bolt { made.Add(1); return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", func() topology.Bolt { return sink.Bolt() }, 1).Input("pass", topology.Shuffle())
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{Guarantee: workers.AtLeastOnce, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	expectSink(t, sink, n, 1)
	if sum.Duration < 900*time.Millisecond {
		t.Fatalf("the run took %v: too short to show calls per leader round", sum.Duration)
	}
	// The run's plan, the leader's and each node's member's (one
	// generation), the leader's list of tasks once per revision of the
	// submission it decides on, and one instance per task: 8 here.
	// 16 leaves room for a generation more; 200 a second does not.
	if got := made.Load(); got > 16 {
		t.Fatalf("the bolt's factory ran %d times in a run of %v with 2 tasks of it", got, sum.Duration.Round(time.Millisecond))
	}
	t.Logf("the bolt's factory ran %d times in a run of %v", made.Load(), sum.Duration.Round(time.Millisecond))
}
