package sources_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ackflow/ackflow/topology"
)

// record is one emit a collector saw.
type record struct {
	Stream string
	ID     topology.MsgID
	Values topology.Values
}

// collector is a topology.SpoutCollector that keeps what a spout emits, so
// that unit tests can drive a spout without the runtime.
type collector struct {
	recs   []record
	refuse func(topology.MsgID) bool // emits it refuses, as the runtime refuses a bad record
}

var errRefused = errors.New("collector: refused")

func (c *collector) Emit(id topology.MsgID, values topology.Values) error {
	return c.EmitTo(topology.DefaultStream, id, values)
}

func (c *collector) EmitTo(stream string, id topology.MsgID, values topology.Values) error {
	if c.refuse != nil && c.refuse(id) {
		return errRefused
	}
	c.recs = append(c.recs, record{stream, id, values})
	return nil
}

func (c *collector) EmitUntracked(stream string, values topology.Values) error {
	c.recs = append(c.recs, record{Stream: stream, Values: values})
	return nil
}

func (c *collector) EmitDirect(_ int, stream string, id topology.MsgID, values topology.Values) error {
	return c.EmitTo(stream, id, values)
}

// offsets returns the offsets of the records, in emit order.
func (c *collector) offsets() []int64 {
	out := make([]int64, len(c.recs))
	for i, r := range c.recs {
		out[i] = r.ID.Offset
	}
	return out
}

// taskContext is what the runtime gives task index of parallelism.
func taskContext(index, parallelism int, guarantee string) topology.TaskContext {
	return topology.TaskContext{
		Topology: "test", Component: "spout", Task: index, Index: index,
		Parallelism: parallelism, Guarantee: guarantee,
	}
}

// drain calls Next until the spout is exhausted and fails the test on an
// error or when it never ends.
func drain(t *testing.T, sp topology.Spout) {
	t.Helper()
	for range 100000 {
		err := sp.Next(t.Context())
		if errors.Is(err, topology.ErrExhausted) {
			return
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
	}
	t.Fatal("the spout never ran out")
}

// nextOnce calls Next once and fails the test on an error other than
// exhaustion.
func nextOnce(t *testing.T, sp topology.Spout) {
	t.Helper()
	if err := sp.Next(t.Context()); err != nil && !errors.Is(err, topology.ErrExhausted) {
		t.Fatalf("Next: %v", err)
	}
}

// open opens sp and fails the test if it refuses.
func open(t *testing.T, sp topology.Spout, tc topology.TaskContext, out *collector) {
	t.Helper()
	if err := sp.Open(tc, out); err != nil {
		t.Fatalf("Open: %v", err)
	}
}

// reopen is a fresh spout that continues from old's position: what the
// runtime does after a failure.
func reopen(t *testing.T, old topology.Spout, fresh topology.Spout, tc topology.TaskContext, out *collector) {
	t.Helper()
	pos, err := old.(topology.Positioned).Position()
	if err != nil {
		t.Fatalf("Position: %v", err)
	}
	open(t, fresh, tc, out)
	if err := fresh.(topology.Positioned).Seek(pos); err != nil {
		t.Fatalf("Seek(%x): %v", pos, err)
	}
}

// checkPositioned checks the topology.Positioned contract on a bounded
// spout, the same way for every source: a task stopped after `after` calls
// to Next and continued by a fresh spout through Position and Seek emits
// exactly what one uninterrupted task emits, with the same message IDs;
// and a fresh spout sought to the final position emits nothing more.
func checkPositioned(t *testing.T, newSpout func() topology.Spout, tc topology.TaskContext, after int) {
	t.Helper()
	var want, got collector
	ref := newSpout()
	open(t, ref, tc, &want)
	drain(t, ref)
	checkClose(t, ref)

	first := newSpout()
	open(t, first, tc, &got)
	for range after {
		nextOnce(t, first)
	}
	if len(want.recs) > 0 && (len(got.recs) == 0 || len(got.recs) == len(want.recs)) {
		t.Fatalf("task %d of %d: %d Next calls emitted %d of %d records; the test needs a stop in the middle", tc.Index, tc.Parallelism, after, len(got.recs), len(want.recs))
	}
	second := newSpout()
	reopen(t, first, second, tc, &got)
	checkClose(t, first)
	drain(t, second)
	if fmt.Sprint(got.recs) != fmt.Sprint(want.recs) {
		t.Fatalf("task %d of %d: across a seek emitted\n%v\nwithout one\n%v", tc.Index, tc.Parallelism, got.recs, want.recs)
	}

	var rest collector
	third := newSpout()
	reopen(t, second, third, tc, &rest)
	checkClose(t, second)
	if err := third.Next(t.Context()); !errors.Is(err, topology.ErrExhausted) || len(rest.recs) > 0 {
		t.Fatalf("task %d of %d: after seeking to the end, Next emitted %d records and returned %v", tc.Index, tc.Parallelism, len(rest.recs), err)
	}
	checkClose(t, third)
}
