// Package sources holds ready-made spouts. Sources must be replayable for
// at-least-once and exactly-once (DESIGN.md section 8): each one names its
// records by their position in the source, so a replay carries the same
// message ID and record ID, and receivers recognise it.
//
//   - Sequence is the generator source: record i of n, made by a function
//     of i. Benchmarks and tests use it, and it is a template for a user's
//     own spout.
//   - File emits the lines of a text file; its tasks split the file by
//     byte ranges, and a line's message ID is its byte offset.
//   - JetStream emits the messages of a JetStream stream; a message's ID is
//     its stream sequence. Its positioned mode serves every guarantee and
//     checkpoints; its durable mode keeps progress on the server with acks.
//   - NATS emits the messages of a core NATS subject. Core NATS cannot
//     replay, so it feeds at-most-once topologies only.
//
// Sequence, File and JetStream (positioned) implement topology.Positioned:
// a checkpoint records their position, one uvarint (the next index, byte
// offset or stream sequence), and a restarted task seeks back to it. Seek
// refuses a position the task could not have reached itself (another
// parallelism, another file), because continuing from it would emit
// records under IDs no earlier run used.
package sources
