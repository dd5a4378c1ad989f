// Package upstreambackup is the output log of one emitting task (DESIGN.md
// section 5). A spout or bolt appends, per input record ID, the outputs it
// emitted while processing that input and the trees that input belongs to;
// the log keeps them until a tree that carried them completes.
//
// The log serves two purposes:
//
//   - Dedup (section 6). When the dedup filter says an input may have been
//     seen, Has confirms it exactly, and on a confirmed duplicate the task does
//     not run user code again: it re-emits Outputs (same record IDs, new edges
//     in the replay's tree), calls Link to tie the entry to that tree, and
//     acks. A replay therefore reaches the tasks downstream that missed it
//     without counting twice in this task's state.
//   - Resend (section 5). When a downstream task's worker dies, ForTask yields
//     every logged record addressed to it, for resending to its next owner.
//
// # Trimming
//
// Complete(tree) runs on the acker's completion notice and removes every entry
// linked to the tree. An entry linked to several trees (the original attempt
// and replays) goes when any of them completes, because that tree's
// completion proves the outputs were fully processed downstream. Expire
// removes entries not appended to or linked since a cutoff: their trees
// failed and were never replayed, or the completion notice was lost. Both
// report each removed input through a callback, so the dedup filter can keep
// it in its ring of completed IDs after the log lets go of it.
//
// An input the task failed itself is a tombstone (Discard): it has no
// outputs, Has does not confirm it, and it stays linked to the failed
// attempt's trees. Complete removes it without reporting it, and so does
// Expire: a failed input was not processed. The runtime completes a
// failed tree only when its root went to the dead letters.
//
// An expired input's trees did not complete. If its root is replayed after
// all, a dedup filter that remembered it from Expire confirms it as a
// duplicate with nothing left to re-emit, and the tasks downstream that
// missed its outputs never get them. The cutoff must therefore lie beyond the
// time in which the spout may still replay the root (several message
// timeouts), and Link and Append keep an entry young while replays use it.
//
// Ages come from the times given to Append. Link takes no time and uses the
// latest time given to Append, which in a busy task is close to now; the
// clock never runs backwards, so a wall-clock step back can delay expiry but
// never strand entries.
//
// # Bounds and push-back
//
// Config bounds the number of inputs logged and the bytes of their outputs
// (as estimated by the caller). Append never refuses and never evicts: an
// entry dropped before its tree completes would leave a replay with nothing
// to re-emit. Instead Full tells the runtime to stop its spouts reading their
// sources (section 4, flow control) until completions trim the log.
//
// # Ownership and memory
//
// A Log belongs to one task goroutine: no locks, no goroutines. Append, Link,
// Has and Outputs cost O(1) (times the few trees an entry belongs to);
// Complete and Expire cost O(1) per entry they remove; ForTask walks the log,
// which is fine for a call made when a task changes owner.
//
// An entry costs a 112-byte struct that embeds its first tree link, a slot in
// the entry map and one in the tree map, plus 96 bytes per Output struct.
// BenchmarkMemoryPerEntry measures 255 bytes per input with one output, so
// DefaultConfig's 1<<18 entries take about 64 MiB of the log's own memory on
// top of MaxBytes. The records' Values are shared with the records as sent,
// not copied; what they keep alive is the caller's to count in Append's size.
// Removed entries are reused with their output buffers (up to a bound), which
// keeps Append and Complete free of allocation in steady state:
// BenchmarkAppendComplete measures about 170 ns per input of 10 outputs when
// the log is small, rising to about 600 ns with 10 000 entries held and 1.3 us
// with 200 000 as the entries fall out of cache.
package upstreambackup
