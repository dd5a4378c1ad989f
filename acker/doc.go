// Package acker decides when a tree of records is fully processed, using
// Storm's XOR algorithm. Each acker task of the runtime owns one Tracker, feeds
// it the INIT, ACK, FAIL and RESET messages addressed to it, calls Tick on a
// timer, and sends the verdicts it returns: a completed tree lets the spout
// forget its root and every holder trim its output log (DESIGN.md sections 4
// and 5); a failed or expired tree makes the spout replay the root. (The
// runtime's acker task handles ABANDON, for a failed tree whose root went
// to the dead letters, itself: the Tracker has already forgotten the tree.)
//
// # The algorithm
//
// Every send of a record along a tree gets a random 64-bit edge ID. The spout
// sends INIT(tree, XOR of its root edges, spout task). A task that acks input
// edge e after emitting children on edges c1..cn sends ACK(tree, e^c1^...^cn).
// Every edge thus enters the tree's value twice, once by the message that
// created it and once by the ack of the record it carried, so the value is 0
// when every edge has been acked. While an edge is unacked the value is 0 only
// by a 2^-64 chance. XOR is commutative and associative, so the order of messages does not
// matter, and a tracker keeps just the running XOR per tree (Storm's design:
// a few dozen bytes per pending tree however large the tree grows).
//
// A tree completes only once its INIT has been seen: before that the tracker
// neither knows the spout to tell nor has the root edges in the value.
//
// # Assumptions
//
//   - One owner. A Tracker starts no goroutines, takes no locks and reads no
//     clock: the acker task's goroutine owns it and drives expiry by calling
//     Tick every RotateEvery, which also makes it testable without sleeping.
//   - Each message is applied at most once. A duplicated ACK XORs its value in
//     twice, which cancels it, so the tree may complete early or never. The
//     runtime must keep a duplicated ack message (NATS may deliver one twice)
//     from reaching Handle; the Tracker cannot tell a duplicate from a
//     legitimate message with the same value and does not try.
//   - Messages may be lost, delayed and reordered. ACKs that arrive before
//     their INIT are kept. A lost message leaves the value non-zero until the
//     tree expires, and the expiry's NoticeFailed makes the spout replay.
//   - Tree IDs are random per attempt of a root (DESIGN.md section 3). A
//     message for a tree that has already completed or failed (a straggler of
//     a failed attempt, say) opens a new entry that never sees an INIT and
//     expires silently. That costs memory for up to one timeout and is
//     accepted because telling stale attempts apart would cost memory for
//     every tree.
//   - Tasks whose IDs are equal mod 64 share a bit in Verdict.Holders, so the
//     runtime notifies all of them. A notice for a tree a task holds nothing
//     for is ignored by that task, so over-notifying is harmless.
//
// # Memory
//
// A pending tree costs one map slot: an 8-byte key and an 18-byte packed
// entry (value, holders, spout task and state). With the map's overhead
// that is between about 32 and 64 bytes per tree for large counts, depending
// on where the count falls between the map's growth steps;
// BenchmarkMemoryPerPendingTree measures 59 at 1e6 pending trees. See
// packedEntry for the layout and what it costs in speed (nothing measurable).
package acker
