package sources

import (
	"context"
	"fmt"

	"github.com/ackflow/ackflow/topology"
)

var _ topology.Positioned = (*Sequence)(nil)

// Sequence emits Make(i) for i = 0..N-1 on Stream, with message ID offset i.
// With several tasks, task k of p emits the i with i mod p == k, so the
// component as a whole emits each i once. Its position is the next i, so a
// checkpoint can rewind it (topology.Positioned).
type Sequence struct {
	N      int64
	Make   func(i int64) topology.Values
	Stream string // default topology.DefaultStream
	// PerNext is how many records one Next emits (default 256).
	PerNext int

	next, step, index int64
	out               topology.SpoutCollector
}

// NewSequence returns a factory for the builder.
func NewSequence(n int64, make func(i int64) topology.Values) func() topology.Spout {
	return func() topology.Spout { return &Sequence{N: n, Make: make} }
}

// Open starts at the task's first position.
func (s *Sequence) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.out = out
	s.index, s.step = int64(tc.Index), int64(max(tc.Parallelism, 1))
	s.next = s.index
	if s.Stream == "" {
		s.Stream = topology.DefaultStream
	}
	if s.PerNext <= 0 {
		s.PerNext = 256
	}
	return nil
}

// Next emits up to PerNext records.
func (s *Sequence) Next(context.Context) error {
	for i := 0; i < s.PerNext; i++ {
		if s.next >= s.N {
			return topology.ErrExhausted
		}
		s.out.EmitTo(s.Stream, topology.MsgID{Offset: s.next}, s.Make(s.next))
		s.next += s.step
	}
	return nil
}

// Position is the next i to emit, as a uvarint.
func (s *Sequence) Position() ([]byte, error) { return encodePosition(uint64(s.next)), nil }

// Seek continues from a position Position returned. The position must be
// one of this task's indexes: another one means the checkpoint was taken
// with a different parallelism, and continuing from it would emit indexes
// that belong to another task.
func (s *Sequence) Seek(position []byte) error {
	next, err := decodePosition(position, "sequence index", maxOffset)
	if err != nil {
		return err
	}
	if int64(next)%s.step != s.index {
		return fmt.Errorf("sources: sequence position %d is not an index of task %d of %d (i mod %d == %d); was the checkpoint taken with another parallelism?", next, s.index, s.step, s.step, s.index)
	}
	s.next = int64(next)
	return nil
}

// Ack does nothing: a generator has nothing to commit.
func (s *Sequence) Ack(topology.MsgID) {}

// Fail does nothing: the runtime replays the record it kept.
func (s *Sequence) Fail(topology.MsgID) {}

// Close does nothing.
func (s *Sequence) Close() error { return nil }
