package dedup

import "unsafe"

// prefetch asks the CPU to bring the cache line at p in, without waiting
// for it (PREFETCHT0): unlike a load, it never holds up the instructions
// after it while the line is on its way.
//
//go:noescape
func prefetch(p unsafe.Pointer)

// prefetchAt is prefetch of &words[at[i]] for each of the first n of at,
// in one call: a call of an assembly function per line cost about as much
// as the prefetch saved in word count's profiles (docs/performance.md,
// round nineteen). The caller keeps every at[i] within words.
//
//go:noescape
func prefetchAt(words *uint64, at *uint64, n int)
