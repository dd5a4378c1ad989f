// Package workers is the process that hosts tasks: it places tasks on
// workers, runs each task in its own goroutine with a bounded inbox, batches
// records per destination task, carries them over NATS (or hands them over
// in memory when both tasks live in the same worker), and runs the acking
// protocol of package acker on top.
//
// RunLocal runs a whole topology in one process: an embedded NATS server and
// N logical workers, each with its own NATS connection, so records really
// cross NATS (through memory rather than loopback TCP when the run starts
// its own server: embednats.Server.InProcess). A bounded run (spouts that return topology.ErrExhausted) ends
// when every spout is exhausted and everything in flight is processed.
// Local mode is cluster mode in one process, not a second runtime (below).
//
// RunNode runs a worker process of a cluster (DESIGN.md section 7): it joins
// the membership in JetStream KV (package cluster), runs its tasks of the
// current generation of every submitted topology it has (JoinGeneration,
// member.go), and, where it wins the election, leads the topology: it
// writes new generations when workers die or join or the parallelism
// changes, begins them and takes their checkpoints (lead.go, leader.go).
// Every task of a generation starts from the same checkpoint, and frames of
// other generations are dropped. A topology without checkpoints
// (at-most-once, or NoCheckpoints) moves a dead worker's tasks instead, and
// a submission's FailAfter bounds how often failed tasks start it again.
// NodeConfig.Memory runs the nodes of one process over an in-memory
// cluster (cluster.MemoryCluster) instead of the KV buckets.
//
// RunLocal runs on that control plane (incluster.go): Config.Workers nodes
// in the process over an in-memory cluster, local mode's placement
// (NodeConfig.Place), crash chaos as a node that dies and comes back under
// its name, and a summary built from the figures of every member of every
// generation and of every leader (figures.go).
//
// Nothing is dropped without a trace (DESIGN.md 6b). Emits are checked and
// their values normalised (topology.Values); a refused emit returns an error
// wrapping ErrEmitRefused. Lost frames are found from sequence numbers and
// senders' high-water marks and resent (link.go). Control messages have a
// mailbox that never drops (queue.go). Replays back off, and a root that
// fails Config.MaxAttempts times goes to Config.DeadLetters.
//
// Lock ordering: no executor holds a lock while it sends; a mailbox's mutex
// guards only its slice and is never held while a frame is handled.
package workers
