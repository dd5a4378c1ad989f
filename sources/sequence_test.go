package sources_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

func TestSequenceEmitsEachPositionOnceAcrossTasks(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	sink := flowtest.NewSink()
	b := topology.NewBuilder("sequence")
	b.Spout("seq", sources.NewSequence(n, func(i int64) topology.Values { return topology.Values{i} }), 3).Outputs("i")
	b.Bolt("sink", sink.Bolt, 2).Input("seq", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Chaos: chaos.Config{Drop: 0.05, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := int64(0); i < n; i++ {
		if seen[i] == 0 {
			t.Fatalf("position %d never arrived", i)
		}
	}
	if sum.Component("seq").Emitted != n {
		t.Fatalf("the spouts emitted %d records, want %d", sum.Component("seq").Emitted, n)
	}
}

func newSeq(n int64) *sources.Sequence {
	return &sources.Sequence{N: n, Make: func(i int64) topology.Values { return topology.Values{i} }, PerNext: 7}
}

func TestSequencePositionSeekContinues(t *testing.T) {
	for p := 1; p <= 4; p++ {
		for i := range p {
			checkPositioned(t, func() topology.Spout { return newSeq(100) }, taskContext(i, p, "exactly-once"), 2)
		}
	}
}

func TestSequenceSeekRefusesForeignPositions(t *testing.T) {
	for _, tc := range []struct {
		name string
		pos  []byte
		want string
	}{
		{"truncated uvarint", []byte{0x80}, "does not decode"},
		{"trailing bytes", []byte{3, 0}, "does not decode"},
		{"empty", nil, "does not decode"},
		{"beyond int64", binary.AppendUvarint(nil, 1<<63), "not a valid"},
		{"another task's index", binary.AppendUvarint(nil, 5), "not an index of task 1 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeq(10)
			open(t, s, taskContext(1, 3, "at-least-once"), &collector{})
			err := s.Seek(tc.pos)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Seek(%x) = %v, want an error saying %q", tc.pos, err, tc.want)
			}
		})
	}
}

func TestSequenceSeekPastTheEndIsExhausted(t *testing.T) {
	s := newSeq(10)
	var out collector
	open(t, s, taskContext(0, 1, "at-least-once"), &out)
	if err := s.Seek(binary.AppendUvarint(nil, 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Next(t.Context()); !errors.Is(err, topology.ErrExhausted) || len(out.recs) > 0 {
		t.Fatalf("Next after seeking to the end: %v, emitted %d", err, len(out.recs))
	}
}
