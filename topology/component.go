package topology

import (
	"context"
	"errors"

	"github.com/rs/zerolog"
)

// DefaultStream is the stream an emit without a stream name goes to.
const DefaultStream = "default"

// TickStream is the stream of the tick tuples a bolt with Tick(d) receives.
// A tick tuple has no values and is not tracked: acking it is a no-op.
const TickStream = "__tick"

// ErrExhausted is returned by Spout.Next when a bounded source has no more
// records. The runtime stops calling Next but keeps the spout open until
// every record it emitted is processed (or replayed and processed).
var ErrExhausted = errors.New("topology: source exhausted")

// MsgID names a spout record by its position in the source: partition and
// offset (for a file, the byte offset; for a JetStream stream, the stream
// sequence). The runtime derives the record's ID from it, so a replay of the
// same position carries the same record ID.
type MsgID struct {
	Partition int32
	Offset    int64
}

// TaskContext tells a task who it is.
type TaskContext struct {
	Topology    string
	Component   string
	Task        int // task ID, unique in the topology
	Index       int // 0..Parallelism-1 within the component
	Parallelism int
	Worker      int // worker slot hosting the task
	Logger      zerolog.Logger
}

// Spout reads a source and emits root records. One goroutine calls all of
// its methods, so a spout needs no locks.
type Spout interface {
	// Open is called once before Next.
	Open(tc TaskContext, out SpoutCollector) error
	// Next emits zero or more records and returns. It returns ErrExhausted
	// when a bounded source is done. Next should not block for long: the
	// runtime handles acks and replays between calls; ctx is cancelled when
	// the task stops.
	Next(ctx context.Context) error
	// Ack is called when the whole tree of the record emitted with id has
	// been processed.
	Ack(id MsgID)
	// Fail is called when the tree failed or timed out. Unless the spout
	// implements SelfReplaying, the runtime then replays the record itself.
	Fail(id MsgID)
	// Close is called once when the task stops.
	Close() error
}

// SelfReplaying is implemented by spouts that replay failed records
// themselves (for example by rewinding a consumer); the runtime then only
// calls Fail and forgets the record.
type SelfReplaying interface {
	ReplaysItself() bool
}

// SpoutCollector takes a spout's emits.
type SpoutCollector interface {
	// Emit sends a tracked record on the default stream.
	Emit(id MsgID, values Values)
	// EmitTo sends a tracked record on a named stream.
	EmitTo(stream string, id MsgID, values Values)
	// EmitUntracked sends a record that is never acked nor replayed.
	EmitUntracked(stream string, values Values)
	// EmitDirect sends a tracked record to one task of a component that
	// subscribed to stream with the Direct grouping.
	EmitDirect(task int, stream string, id MsgID, values Values)
}

// Bolt processes records. One goroutine calls all of its methods.
type Bolt interface {
	Prepare(tc TaskContext, out Collector) error
	// Execute processes one input. The bolt must eventually Ack or Fail it
	// (or the tree times out). A panic fails the input; the worker survives.
	Execute(in *Tuple)
	Cleanup() error
}

// Collector takes a bolt's emits, acks and fails.
type Collector interface {
	// Emit sends a record on the default stream, anchored to anchor (nil:
	// unanchored, so not tracked).
	Emit(anchor *Tuple, values Values)
	// EmitTo sends a record on a named stream anchored to every anchor.
	EmitTo(stream string, anchors []*Tuple, values Values)
	// EmitWithID is EmitTo with an explicit record ID, for emits that do
	// not follow from one input (timers, joins): make the ID deterministic,
	// for example topology.HashID(component, window, key).
	EmitWithID(stream string, id uint64, anchors []*Tuple, values Values)
	// EmitDirect sends to one task of a component subscribed with Direct.
	EmitDirect(task int, stream string, anchors []*Tuple, values Values)
	Ack(in *Tuple)
	Fail(in *Tuple)
	// ResetTimeout restarts the message timeout of in's trees.
	ResetTimeout(in *Tuple)
}

// BasicBolt is a bolt that emits anchored to its input and is acked by the
// runtime when Execute returns nil, failed when it returns an error.
type BasicBolt interface {
	Prepare(tc TaskContext) error
	Execute(in *Tuple, out BasicCollector) error
	Cleanup() error
}

// BasicCollector takes a basic bolt's emits, all anchored to the input.
type BasicCollector interface {
	Emit(values Values)
	EmitTo(stream string, values Values)
	EmitWithID(stream string, id uint64, values Values)
}

// Stateful is implemented by bolts that keep state which must survive a
// crash. The runtime snapshots it at checkpoints (DESIGN.md section 8) and
// treats the bolt's tasks as stateful (dedup, placement) from now on.
type Stateful interface {
	Snapshot() ([]byte, error)
	Restore(snapshot []byte) error
}

// basicAdapter runs a BasicBolt as a Bolt.
type basicAdapter struct {
	inner BasicBolt
	out   Collector
	in    *Tuple
	one   [1]*Tuple
}

// AsBolt wraps a BasicBolt into a Bolt.
func AsBolt(b BasicBolt) Bolt { return &basicAdapter{inner: b} }

func (a *basicAdapter) Prepare(tc TaskContext, out Collector) error {
	a.out = out
	return a.inner.Prepare(tc)
}

func (a *basicAdapter) Execute(in *Tuple) {
	a.in = in
	a.one[0] = in
	err := a.inner.Execute(in, a)
	a.in, a.one[0] = nil, nil
	if err != nil {
		a.out.Fail(in)
		return
	}
	a.out.Ack(in)
}

func (a *basicAdapter) Cleanup() error { return a.inner.Cleanup() }

// Inner returns the wrapped BasicBolt (so the runtime can see whether it is
// Stateful).
func (a *basicAdapter) Inner() any { return a.inner }

func (a *basicAdapter) Emit(values Values) { a.out.EmitTo(DefaultStream, a.one[:], values) }
func (a *basicAdapter) EmitTo(stream string, values Values) {
	a.out.EmitTo(stream, a.one[:], values)
}
func (a *basicAdapter) EmitWithID(stream string, id uint64, values Values) {
	a.out.EmitWithID(stream, id, a.one[:], values)
}

// Unwrap returns the user's object behind a Bolt (the BasicBolt for a
// wrapped one), so the runtime can check optional interfaces.
func Unwrap(b Bolt) any {
	if a, ok := b.(*basicAdapter); ok {
		return a.inner
	}
	return b
}
