// Package cluster is where the worker processes of a cluster meet (DESIGN.md
// section 7). It holds what they agree on through NATS and nothing else: who
// is alive (Members), which topologies operators submitted (Registry), the
// current generation of each running topology (Generations), which worker
// leads each topology (Elector), how tasks are spread over the live
// workers (Assign), what each worker last reported of its tasks
// (Statuses, which ackflow status reads), and where each at-most-once
// spout over a rewindable source stands (Positions: written before the
// spout sends what it read, so that a spout task that starts again reads
// on from there and sends nothing twice).
//
// A generation fixes, for one topology, the plan (the parallelism of every
// component), the worker of every task and the checkpoint epoch the tasks
// restore from. The topology's leader writes a new generation when a worker
// joins or dies or an operator rebalances, and every worker then stops its
// tasks of the old generation and starts those the new one gives it. The
// generation number is the fencing epoch carried in every frame: receivers
// drop frames of another generation, so a worker paused past its lease that
// wakes up cannot affect anything.
//
// NATS is the coordination engine; nothing here is home-made consensus.
// Every primitive is a JetStream key-value bucket used in two ways:
// compare-and-set on a key's revision (Create when the key must be absent,
// Update(rev) when it must not have changed), and a bucket TTL with limit
// markers for liveness (a Put renews a key; when the puts stop the key
// expires and watchers see it go). Members and leaders are leases of that
// kind; registry entries and generations are plain compare-and-set records.
//
// Each primitive is a small interface with two implementations: one over a
// KV bucket (NewKVMembers, NewKVRegistry, NewKVGenerations, NewKVElector,
// NewKVStatuses, NewKVPositions, all sharing the caller's
// jetstream.JetStream) for cluster mode, and one in memory
// (NewMemoryMembers, NewMemoryRegistry, NewMemoryGenerations,
// NewMemoryElector, NewMemoryStatuses, NewMemoryPositions) for local mode
// and tests. Both run the same code over a
// bucket: the in-memory bucket imitates the part of JetStream KV that the
// primitives use, revisions, TTLs and expiry markers included, so local mode
// behaves like a cluster. Package clustertest is the conformance suite both
// pass.
//
// A worker holds all six as a Coordination: OpenKV opens them on the
// server's buckets; a MemoryCluster holds a whole cluster's entries in
// memory, and each worker running in the process opens handles of its own
// on it (MemoryCluster.Open), as each worker process opens the buckets on
// the server.
package cluster
