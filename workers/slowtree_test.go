package workers_test

import (
	"bytes"
	"context"
	rtrace "runtime/trace"
	"testing"
	"time"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// sleepy forwards its input after sleeping d: every tree takes at least d.
type sleepy struct {
	pass
	d time.Duration
}

func (s *sleepy) Execute(in *topology.Tuple) {
	time.Sleep(s.d)
	s.pass.Execute(in)
}

// TestSlowTreesAreTraced: while an execution trace runs, a tree that takes
// 5 ms or more is logged as an "ackflow.slow-tree" event (what
// tools/tailtrace reads). The event's category is in the trace's string
// table only if such an event was logged.
func TestSlowTreesAreTraced(t *testing.T) {
	defer goleak.VerifyNone(t)
	if rtrace.IsEnabled() {
		t.Skip("an execution trace is already running (go test -trace): this test needs its own")
	}
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	const n = 20
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "slow", func() topology.Spout { return &numbers{n: n} },
		func() topology.Bolt { return &sleepy{d: 6 * time.Millisecond} }, sink)
	_, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce})
	rtrace.Stop()
	if err != nil {
		t.Fatal(err)
	}
	exactlyOnceEach(t, sink, n)
	if !bytes.Contains(buf.Bytes(), []byte("ackflow.slow-tree")) {
		t.Fatalf("a trace of %d trees of 6 ms or more has no ackflow.slow-tree event", n)
	}
}
