package dedup

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ackflow/ackflow/internal/hugepages"
)

// asTheBinary advises the heap for transparent huge pages until b ends, as
// the ackflow binary does (package hugepages), so that a filter of
// megabytes is read with the TLB misses it has there (on an AMD EPYC host,
// BenchmarkCheckNewPrefetched/ahead=8 took 44-55 ns a check with 4 KiB
// pages and 40-41 ns with huge pages). The memory allocated next comes from
// the advised reserve.
func asTheBinary(b *testing.B) {
	b.Helper()
	a, err := hugepages.Start(time.Hour, 64<<20)
	if err != nil {
		b.Logf("the heap goes on with 4 KiB pages: %v", err)
	}
	b.Cleanup(a.Stop)
}

// warm returns a filter of cfg that has seen three windows of random IDs
// and twice Exact completions, so that every generation and every block of
// the ring is as full as in a long-running task and a lookup that misses
// the ring pays for all of it.
func warm(b *testing.B, cfg Config) *Filter {
	b.Helper()
	asTheBinary(b)
	f, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3 * cfg.Window {
		f.Check(r.Uint64(), nil)
	}
	for range 2 * cfg.Exact {
		f.Completed(r.Uint64())
	}
	return f
}

// BenchmarkCheckNew is the common case: an ID no generation has seen. It
// probes every generation and sets k bits in the newest, and pays for the
// rotations (a clear of one generation every Window/(Generations-1) IDs).
func BenchmarkCheckNew(b *testing.B) {
	f := warm(b, DefaultConfig())
	r := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	for b.Loop() {
		f.Check(r.Uint64(), nil)
	}
}

// BenchmarkCheckNewPrefetched checks fresh IDs as a bolt task does: a
// frame of 512 at a time, each ID's lines prefetched a few checks ahead of
// its Check (ahead=8, what workers.prefetchAhead is) or all of the frame's
// before its first (ahead=512, what tasks did until round twelve), so that
// the cache misses of several checks overlap.
func BenchmarkCheckNewPrefetched(b *testing.B) {
	for _, ahead := range []int{8, 512} {
		b.Run(fmt.Sprintf("ahead=%d", ahead), func(b *testing.B) {
			f := warm(b, DefaultConfig())
			r := rand.New(rand.NewPCG(3, 4))
			ids := make([]uint64, 512)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				i := n % len(ids)
				if i == 0 {
					for j := range ids {
						ids[j] = r.Uint64()
					}
					for j := range min(ahead, len(ids)) {
						f.Prefetch(ids[j])
					}
				}
				if i+ahead < len(ids) {
					f.Prefetch(ids[i+ahead])
				}
				f.Check(ids[i], nil)
				n++
			}
		})
	}
}

// BenchmarkCheckHit is a replay: every ID is in the newest generation and
// is confirmed, by the ring or by the caller's exact record. by=ring finds
// the IDs among the newest completions, the best case; by=ring-old finds
// them nearly Exact completions back, in the oldest blocks, the worst; and
// by=exact first misses the whole ring.
func BenchmarkCheckHit(b *testing.B) {
	for _, by := range []string{"ring", "ring-old", "exact"} {
		b.Run("by="+by, func(b *testing.B) {
			cfg := DefaultConfig()
			f := warm(b, cfg)
			ids := make([]uint64, 1<<12)
			r := rand.New(rand.NewPCG(5, 6))
			for i := range ids {
				ids[i] = r.Uint64()
				f.Check(ids[i], nil)
				if by != "exact" {
					f.Completed(ids[i])
				}
			}
			if by == "ring-old" {
				for range cfg.Exact - len(ids) {
					f.Completed(r.Uint64())
				}
			}
			exact := func(uint64) bool { return by == "exact" }
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if f.Check(ids[i&(len(ids)-1)], exact) != Duplicate {
					b.Fatal("a replayed ID was not confirmed")
				}
				i++
			}
		})
	}
}

// BenchmarkCompleted is the cost of remembering a trimmed input in a ring
// that has gone round once, so that every block has been touched and each
// push pays its share of the clears, as in a long-running task.
func BenchmarkCompleted(b *testing.B) {
	asTheBinary(b)
	f, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 2 * DefaultConfig().Exact {
		f.Completed(r.Uint64())
	}
	b.ReportAllocs()
	for b.Loop() {
		f.Completed(r.Uint64())
	}
}

// BenchmarkBitsPerID reports the memory cost of the window in Bloom bits
// per remembered ID and the false-positive rate measured in steady state
// (Suspects among never-seen IDs), next to ns per fresh check.
//
// The sizes besides the default are what docs/performance.md weighs
// against the goal of 16 bits per ID: more generations make the window
// tighter (fewer bits spent on IDs past it) but split the false-positive
// budget further and share an ID's cache line between more of them, in
// smaller pieces that need more bits; a higher FPRate buys bits with more
// Suspects.
func BenchmarkBitsPerID(b *testing.B) {
	for _, c := range []struct {
		p    float64
		gens int
	}{{DefaultConfig().FPRate, DefaultConfig().Generations}, {0.001, 2}, {0.001, 3}, {0.001, 4}, {0.0009, 4}, {0.0008, 4}, {0.001, 5}, {0.001, 8}, {0.005, 4}, {0.01, 4}} {
		b.Run(fmt.Sprintf("fp=%v/gens=%d", c.p, c.gens), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.FPRate, cfg.Generations = c.p, c.gens
			f := warm(b, cfg)
			before := f.Stats()
			r := rand.New(rand.NewPCG(9, 10))
			for b.Loop() {
				f.Check(r.Uint64(), nil)
			}
			s := f.Stats()
			b.ReportMetric(s.BitsPerID, "bits/id")
			b.ReportMetric(float64(s.Suspects-before.Suspects)/float64(s.Checked-before.Checked), "fp-rate")
		})
	}
}
