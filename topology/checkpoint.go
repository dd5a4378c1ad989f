package topology

import "errors"

// Checkpoints (DESIGN.md section 8). At every checkpoint the runtime pauses
// the spouts, waits until no tree is in flight, and snapshots every task:
// each spout's source position, each stateful bolt's state (its keyed State,
// and Snapshot for bolts that implement Stateful), and the runtime's own
// bookkeeping. After a failure that loses state, every task goes back to the
// latest complete checkpoint and the spouts seek back to its positions.

// Positioned is implemented by spouts whose source can be rewound: a file
// (byte offset), a JetStream stream (stream sequence), a generator (the next
// index). Checkpoints need it: a spout without it cannot rewind, and the
// runtime refuses checkpoints (and so exactly-once) for its topology with an
// error that names it. Without checkpoints a cluster's runtime writes
// positions too, so that a task started again does not read its source
// from the beginning: at most once, the position before it sends what the
// spout emitted (nothing is sent twice); at least once, every 200 ms, the
// position before the oldest record not yet fully processed.
type Positioned interface {
	// Position returns where the source stands: every record emitted so far
	// comes before it, nothing after it has been emitted. The runtime calls
	// it between calls to Next: while the spout is paused for a checkpoint,
	// at most once before it sends what the spout emitted, and at least
	// once without checkpoints every 200 ms while it emits (sooner just
	// after its task starts).
	Position() ([]byte, error)
	// Seek moves the source to a position Position returned. The runtime
	// calls it after Open and before the first Next when the task restarts
	// from a checkpoint, or without checkpoints from the position written
	// last.
	Seek(position []byte) error
}

// ErrNoPosition, wrapped in the error of Position or Seek, says that the
// source as configured keeps its progress elsewhere and cannot rewind (a
// JetStream durable consumer acks on the server). Without checkpoints the
// runtime then keeps no position for the spout, whose source resumes by
// itself; checkpoints still fail with the error.
var ErrNoPosition = errors.New("topology: the source has no position")

// Transactional is implemented by sink bolts that deliver their outputs in
// transactions committed with the checkpoints (a two-phase commit, as
// Flink's TwoPhaseCommitSinkFunction): exactly-once delivery to a system
// that cannot drop duplicates itself, such as a file. Outputs received
// after the last checkpoint are discarded when the run goes back to it, and
// produced again by the replay.
type Transactional interface {
	// PreCommit ends the transaction of everything received since the
	// previous checkpoint and makes it durable but not yet visible: it must
	// survive a crash of the process. The runtime calls it when it
	// snapshots the bolt for checkpoint epoch.
	PreCommit(epoch uint64) error
	// Commit makes the transactions of epoch and every earlier one visible.
	// The runtime calls it once checkpoint epoch is complete, and may call
	// it again for the same epoch: it must be idempotent.
	Commit(epoch uint64) error
	// Recover is called after Prepare (and Restore) when the task starts,
	// with the epoch of the checkpoint the run starts from (0 when there is
	// none): pending transactions up to epoch are committed, later ones
	// discarded.
	Recover(epoch uint64) error
}
