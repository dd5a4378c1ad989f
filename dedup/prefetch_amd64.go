package dedup

// prefetch asks the CPU to bring the cache line at p in, without waiting
// for it (PREFETCHT0): unlike a load, it never holds up the instructions
// after it while the line is on its way.
//
//go:noescape
func prefetch(p *uint64)
