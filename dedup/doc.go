// Package dedup is the receiver-side duplicate filter of a stateful task or a
// sink (DESIGN.md section 6). After a failure, upstream tasks replay what they
// logged, so a task sees again records it has already applied to its state.
// Each such task owns one Filter and asks it about every input ID before
// running user code:
//
//   - Fresh: process the record.
//   - Duplicate: do not run user code again; re-emit the outputs logged for
//     this input (same record IDs, new edges) and ack. That keeps a replay
//     from double-counting here while still reaching downstream tasks that
//     missed it.
//   - Suspect: process the record and count it in a metric.
//
// # Why a "maybe" is confirmed exactly
//
// The fast path is a Bloom filter: a few bits per ID and a handful of memory
// probes tell "never seen" from "maybe seen". A Bloom filter has false
// positives, and dropping a record on a false positive would lose it for
// good: nothing upstream would ever replay it, because the drop is acked.
// So a "maybe" is only a reason to look further. The record is dropped only
// when an exact record says it was processed: the caller's own (its output-log
// index holds every input whose tree has not completed; a JetStream sink has
// the server's Nats-Msg-Id window) or the Filter's ring of recently completed
// IDs, which covers the inputs whose log entries were already trimmed (see
// below for its bounds).
// A maybe that nothing confirms is a Suspect and is processed: at worst a
// genuine duplicate that outlived every exact record is processed twice,
// which is the at-least-once contract; a record is never lost.
//
// The Bloom filter thus does not decide anything; it keeps the exact lookups
// (a callback into the caller, a hash table probe) off the path of the
// overwhelming majority of records, which are new.
//
// # How generations bound the window
//
// A Bloom filter cannot forget, and one that keeps taking IDs fills up until
// every answer is "maybe". The Filter therefore keeps Generations Bloom
// filters of equal size. The newest takes every add; when it holds
// Window/(Generations-1) IDs, the oldest is cleared and becomes the new
// newest. A lookup asks every generation. So the filter always remembers
// the last Window IDs it saw and never more than the last
// Window*Generations/(Generations-1), and its memory and false-positive
// rate stay fixed however long the task runs: each generation is sized for
// its share at FPRate/Generations, so the chance that some generation
// answers "maybe" for a never-seen ID stays below FPRate.
//
// An ID older than the window comes back Fresh even if an exact record
// still holds it, and is processed again. Window must therefore exceed the
// number of IDs a task checks while an exact record can still confirm one:
// the inputs pending in its log plus the ring's Exact completions, with
// room for the time a replay takes to arrive.
//
// # How the ring of completions stays cheap
//
// Completed runs for every processed input, and a lookup in the ring only
// on a Bloom "maybe", so the ring is built for cheap inserts. It is the
// same scheme as the generations, made exact: B = min(16, Exact+1) blocks,
// each taking ceil(Exact/(B-1)) completions. A block is a bucketed log:
// the ID's hash picks one of its buckets (about 32 IDs each at the mean,
// with room for twice that) and the ID is appended there, so an insert
// writes to the end of one of a few thousand buckets, lines that stay in
// cache, instead of a random slot of a megabyte. Once the current block
// has taken its share, the next completion empties the oldest block
// (resets its bucket counts) and goes into it. A lookup scans the ID's
// bucket in every block. So the ring always remembers the last Exact
// completions and never more than the last B*ceil(Exact/(B-1)), about
// Exact*B/(B-1). An ID takes 8 bytes in a log with room for twice what it
// takes, 16 bytes per completion a block holds, and the B-th block makes
// that about 17 bytes per Exact. An ID completed again is simply appended
// again, into the current block: it is remembered from its latest
// completion, and no count per ID is kept. A bucket that fills (one ID
// completed many times over) spills into a map of its block.
//
// # Cost
//
// New allocates the Bloom generations, all of them in one bitset, and the
// first block of the ring; Completed allocates each other block of the
// ring the first time the ring rotates into it, and nothing once all are
// in use, so a task that completes fewer than Exact inputs never pays for
// the whole ring. Stats reports BitsPerID (about 35.5 for the default
// config). The generations are split-block Bloom filters laid side by
// side: an ID's bits lie in one sub-block of each generation, two words
// for the default's four generations, and the sub-blocks of one index sit
// together in one 64-byte unit, one cache line, with the same number of
// bits in each word (a split block, as in Parquet and Impala). So a fresh
// ID costs one line read for every generation together and its bits set
// in that line, which it has just read. Check hashes the ID once (IDs are
// hashes already; a splitmix64 remix guards against counters) where the
// bloom package's own Add and Test would hash it once per generation and
// again to add it. Prefetch asks for an ID's line ahead of its Check, so
// that a task that prefetches its next inputs waits for their cache misses
// together rather than one after another; PrefetchAll asks for several
// IDs' lines in one call, which is how a bolt task asks, eight inputs at
// a time.
//
// A Filter is not safe for concurrent use; the task's goroutine owns it.
package dedup
