package workers_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// lastWords emits once more from Cleanup.
type lastWords struct {
	pass
	errs chan<- error
}

func (l *lastWords) Cleanup() error {
	l.errs <- l.out.Emit(nil, topology.Values{int64(-1)})
	return nil
}

// closingNumbers emits once more from Close.
type closingNumbers struct {
	numbers
	errs chan<- error
}

func (s *closingNumbers) Close() error {
	s.errs <- s.out.EmitTo(s.stream, topology.MsgID{Offset: -1}, topology.Values{int64(-2)})
	return nil
}

// TestEmitsWhileStoppingAreRefused: a bolt's Cleanup and a spout's Close
// run while every task of the run stops, so what they emit would reach no
// one. The emit says so instead of returning nil for a record that
// vanishes, and nothing reaches the sink.
func TestEmitsWhileStoppingAreRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 200
	errs := make(chan error, 4)
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "stopping", func() topology.Spout { return &closingNumbers{numbers{n: n}, errs} },
		func() topology.Bolt { return &lastWords{errs: errs} }, sink)
	quiet := zerolog.Nop()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Logger: &quiet})
	if err != nil {
		t.Fatal(err)
	}
	close(errs)
	got := 0
	for err := range errs {
		got++
		if !errors.Is(err, workers.ErrEmitRefused) || !strings.Contains(err.Error(), "stopping") {
			t.Errorf("an emit while stopping returned %v; want it refused because the task is stopping", err)
		}
	}
	if got != 3 { // the spout and the two tasks of mid
		t.Fatalf("%d emits while stopping; want 3 (the spout's Close and mid's two Cleanups)", got)
	}
	exactlyOnceEach(t, sink, n)
	if len(sink.Values()) != n || sum.Discarded != 0 {
		t.Fatalf("the sink got %d records for %d emitted, %d discarded; the emits while stopping should send nothing", len(sink.Values()), n, sum.Discarded)
	}
}
