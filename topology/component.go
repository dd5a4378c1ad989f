package topology

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
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
	// ComponentTasks lists the task IDs of every component, in index order:
	// what EmitDirect takes.
	ComponentTasks map[string][]int
	// Guarantee is the run's processing guarantee: "at-most-once",
	// "at-least-once" or "exactly-once". A source that can only feed some
	// of them refuses the others in Open.
	Guarantee string
	// MessageTimeout fails a tree not completed in this long.
	MessageTimeout time.Duration
	// CheckpointEvery is the interval between checkpoints (0: none). A sink
	// that deduplicates within a window checks the window is longer than
	// CheckpointEvery plus MessageTimeout.
	CheckpointEvery time.Duration
	// State is the task's keyed state, kept by the runtime and restored
	// after failures; nil unless the component declared KeyedState().
	State *State
	// Context is cancelled when the task stops, also when its worker dies
	// and Cleanup or Close is never called: release connections and other
	// resources with context.AfterFunc(tc.Context, ...).
	Context context.Context
	// NATSURL and NATSOptions are how the task's worker connects to NATS
	// (its servers, credentials, TLS). Sources and sinks given no URL of
	// their own connect the same way.
	NATSURL     string
	NATSOptions []nats.Option
}

// TasksOf returns the task IDs of a component in index order (nil for an
// unknown component): the tasks EmitDirect may name.
func (tc TaskContext) TasksOf(component string) []int { return tc.ComponentTasks[component] }

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
	// Close is called once when the task stops. Every task of the run
	// stops at once, so emits from Close are refused (they would reach no
	// one).
	Close() error
}

// SelfReplaying is implemented by spouts that replay failed records
// themselves (for example by rewinding a consumer); the runtime then only
// calls Fail and forgets the record.
type SelfReplaying interface {
	ReplaysItself() bool
}

// DeadLetterAware is implemented by spouts that want to hear when the
// runtime gives up on one of their records after too many failed attempts
// and sends it to the dead letters: a source that commits positions can then
// commit past it. Fail has been called for every failed attempt already.
type DeadLetterAware interface {
	DeadLettered(id MsgID, reason string)
}

// SpoutCollector takes a spout's emits. An emit that the runtime refuses
// (an undeclared stream, the wrong number of values, a value outside the
// value set, a record too large for a frame, a misused Direct stream)
// returns an error that names the component, stream and field, sends
// nothing, and sends a tracked record to the dead letters, so that it is
// never lost without a trace.
type SpoutCollector interface {
	// Emit sends a tracked record on the default stream.
	Emit(id MsgID, values Values) error
	// EmitTo sends a tracked record on a named stream.
	EmitTo(stream string, id MsgID, values Values) error
	// EmitUntracked sends a record that is never acked nor replayed.
	EmitUntracked(stream string, values Values) error
	// EmitDirect sends a tracked record to the task with ID task (see
	// TaskContext.TasksOf) of a component that subscribed to stream with
	// the Direct grouping.
	EmitDirect(task int, stream string, id MsgID, values Values) error
}

// Bolt processes records. One goroutine calls all of its methods.
type Bolt interface {
	Prepare(tc TaskContext, out Collector) error
	// Execute processes one input. The bolt must eventually Ack or Fail it
	// (or the tree times out). A panic fails the input; the worker survives.
	Execute(in *Tuple)
	// Cleanup is called once when the task stops gracefully (never after a
	// crash). Every task of the run stops at once, so emits from Cleanup
	// are refused: emit what a bolt holds from Execute, Flush (Flusher) or
	// a tick instead.
	Cleanup() error
}

// Collector takes a bolt's emits, acks and fails. An emit the runtime
// refuses returns an error (see SpoutCollector) and sends nothing; the
// inputs it was anchored to are then failed with that error even if the
// bolt acks them, so that the missing output is replayed or dead-lettered,
// never silently lost.
type Collector interface {
	// Emit sends a record on the default stream, anchored to anchor (nil:
	// unanchored, so not tracked).
	Emit(anchor *Tuple, values Values) error
	// EmitTo sends a record on a named stream anchored to every anchor.
	EmitTo(stream string, anchors []*Tuple, values Values) error
	// EmitWithID is EmitTo with an explicit record ID, for emits that do
	// not follow from one input (timers, joins): make the ID deterministic
	// and unique, for example topology.HashID(component, window, key).
	EmitWithID(stream string, id uint64, anchors []*Tuple, values Values) error
	// EmitDirect sends to the task with ID task (see TaskContext.TasksOf)
	// of a component subscribed to stream with the Direct grouping.
	EmitDirect(task int, stream string, anchors []*Tuple, values Values) error
	Ack(in *Tuple)
	// Fail fails in's trees: the spouts replay them (or, after too many
	// attempts, send them to the dead letters).
	Fail(in *Tuple)
	// FailWith is Fail with the reason, which the dead letters record.
	FailWith(in *Tuple, reason error)
	// ResetTimeout restarts the message timeout of in's trees.
	ResetTimeout(in *Tuple)
}

// Flusher is implemented by bolts that buffer work between inputs (a sink
// waiting for acknowledgements, a batch writer). The runtime calls Flush on
// the task's goroutine when the task is idle, at least every few
// milliseconds, and before it snapshots the task for a checkpoint, so that
// such a bolt can ack or fail what it holds without tick tuples.
type Flusher interface {
	Flush()
}

// BasicBolt is a bolt that emits anchored to its input and is acked by the
// runtime when Execute returns nil, failed when it returns an error.
type BasicBolt interface {
	Prepare(tc TaskContext) error
	Execute(in *Tuple, out BasicCollector) error
	Cleanup() error
}

// BasicCollector takes a basic bolt's emits, all anchored to the input. A
// refused emit returns an error and fails the input (see Collector).
type BasicCollector interface {
	Emit(values Values) error
	EmitTo(stream string, values Values) error
	EmitWithID(stream string, id uint64, values Values) error
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
		a.out.FailWith(in, err)
		return
	}
	a.out.Ack(in)
}

func (a *basicAdapter) Cleanup() error { return a.inner.Cleanup() }

// Inner returns the wrapped BasicBolt (so the runtime can see whether it is
// Stateful).
func (a *basicAdapter) Inner() any { return a.inner }

func (a *basicAdapter) Emit(values Values) error {
	return a.out.EmitTo(DefaultStream, a.one[:], values)
}
func (a *basicAdapter) EmitTo(stream string, values Values) error {
	return a.out.EmitTo(stream, a.one[:], values)
}
func (a *basicAdapter) EmitWithID(stream string, id uint64, values Values) error {
	return a.out.EmitWithID(stream, id, a.one[:], values)
}

// Unwrap returns the user's object behind a Bolt (the BasicBolt for a
// wrapped one), so the runtime can check optional interfaces.
func Unwrap(b Bolt) any {
	if a, ok := b.(*basicAdapter); ok {
		return a.inner
	}
	return b
}
