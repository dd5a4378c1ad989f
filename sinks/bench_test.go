package sinks

import (
	"testing"
	"time"

	"github.com/ackflow/ackflow/topology"
)

// discard is a Collector that keeps nothing, so the benchmarks measure
// the sinks.
type discard struct{ collector }

func (*discard) Ack(*topology.Tuple)             {}
func (*discard) FailWith(*topology.Tuple, error) {}

func BenchmarkFileExecute(b *testing.B) {
	s := NewFile(FileConfig{Dir: b.TempDir(), Name: "out"})().(*File)
	if err := s.Prepare(topology.TaskContext{Component: "out", CheckpointEvery: time.Second}, &discard{}); err != nil {
		b.Fatal(err)
	}
	in := tuple(1, "a word", int64(42))
	b.ReportAllocs()
	for b.Loop() {
		s.Execute(in)
	}
	if err := s.Cleanup(); err != nil {
		b.Fatal(err)
	}
}
