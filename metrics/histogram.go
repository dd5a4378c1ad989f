package metrics

import (
	"sync/atomic"
	"time"
)

// LatencyHistogram counts durations in the fixed buckets of a histogram
// family with atomics: the task that observes never waits for a scrape,
// and a scrape reads the counts while the task goes on. A bucket is found
// by a short scan of integer bounds; nothing is allocated.
type LatencyHistogram struct {
	f      *Family
	counts []atomic.Uint64 // per bucket, the last one above every bound
	sum    atomic.Int64    // nanoseconds
}

// NewLatencyHistogram makes an empty histogram of family f, which must be
// a Histogram family.
func NewLatencyHistogram(f *Family) *LatencyHistogram {
	if f.Type != Histogram {
		panic("metrics: " + f.Name + " is not a histogram family")
	}
	return &LatencyHistogram{f: f, counts: make([]atomic.Uint64, len(f.bounds)+1)}
}

// Observe counts one duration.
func (h *LatencyHistogram) Observe(d time.Duration) { h.ObserveN(d, 1) }

// ObserveN counts n observations of total/n each: a batch of inputs
// measured as a whole.
func (h *LatencyHistogram) ObserveN(total time.Duration, n int) {
	if n <= 0 {
		return
	}
	each := int64(total) / int64(n)
	i := 0
	for i < len(h.f.bounds) && each > h.f.bounds[i] {
		i++
	}
	h.counts[i].Add(uint64(n))
	h.sum.Add(int64(total))
}

// Counts returns how many observations each bucket of the family holds
// (not cumulative; the last bucket is above every bound) and their sum:
// a status report's copy of what a scrape would show.
func (h *LatencyHistogram) Counts() (counts []uint64, sum time.Duration) {
	counts = make([]uint64, len(h.counts))
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
	}
	return counts, time.Duration(h.sum.Load())
}
