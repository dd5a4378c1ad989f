// Package sinks holds ready-made bolts that deliver records outside the
// topology. A sink is where a guarantee meets the outside world: the runtime
// can replay records and roll state back, but what a sink has already
// handed to another system stays there, so each sink says which guarantee
// it keeps (DESIGN.md sections 1 and 8):
//
//   - JetStream publishes every input to a JetStream stream with the
//     record's ID and a hash of the message as its Nats-Msg-Id. The server
//     drops a message it stored within its duplicate window, so replays
//     are not stored twice: exactly-once delivery into the stream, in every
//     guarantee that replays (at-least-once and exactly-once), as long as
//     the window is long enough (Prepare checks it when checkpoints are on).
//     Under at-least-once, a record that a rollback reprocessed into
//     another body (a count reached in another order) is stored again
//     rather than dropped, so the newest value is never lost.
//   - File writes per epoch and makes an epoch's file visible only once the
//     checkpoint of that epoch is complete (a two-phase commit, as Flink's
//     TwoPhaseCommitSinkFunction): exactly-once with checkpoints. Each
//     checkpoint names the pending files it covers, so a task restored
//     from it commits those and drops the files of any other instance of
//     the task (one rolled back, or one on a worker that woke up after
//     losing its lease). Without checkpoints it is at-least-once, and its
//     output appears when the run ends.
//   - Stdout prints each input: at-least-once at best, since a replayed or
//     rolled-back record is printed again. It is for trying things out.
//
// Both JetStream and File rely on record IDs being deterministic: a
// replayed record carries the ID of its original (DESIGN.md section 3).
//
// Sinks are built from a plain config struct, like any bolt factory:
//
//	b.Bolt("out", sinks.NewJetStream(sinks.JetStreamConfig{
//		URL:     "nats://127.0.0.1:4222",
//		Subject: "counts",
//	}), 2).Input("count", topology.Shuffle())
package sinks
