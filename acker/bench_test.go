package acker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// BenchmarkHandle feeds trees of one INIT and two ACKs (a spout record and
// one child) and reports ns per message. inflight is how many trees are
// pending at once: 0 completes each tree before the next starts, larger
// values keep the maps large and the lookups out of cache, as under load.
func BenchmarkHandle(b *testing.B) {
	for _, inflight := range []int{0, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			// Precomputed trees, reused round-robin: a tree ID comes back only
			// after its previous use has completed.
			slots := 1 << 16
			for slots <= inflight {
				slots <<= 1
			}
			r := rand.New(rand.NewPCG(1, 2))
			type tree struct{ id, root, child uint64 }
			trees := make([]tree, slots)
			for i := range trees {
				trees[i] = tree{r.Uint64(), r.Uint64(), r.Uint64()}
			}
			tr, err := New(DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			var out []Verdict
			// step j starts tree j, sends the first ACK of tree j-inflight/2
			// and the last ACK of tree j-inflight, so inflight trees are
			// pending in between.
			step := func(j int) {
				t0 := trees[j&(slots-1)]
				out = tr.Handle(initMsg(t0.id, t0.root, 1), out[:0])
				if j -= inflight / 2; j >= 0 {
					t1 := trees[j&(slots-1)]
					out = tr.Handle(ackMsg(t1.id, t1.root^t1.child, 2), out[:0])
				}
				if j -= inflight - inflight/2; j >= 0 {
					t2 := trees[j&(slots-1)]
					out = tr.Handle(ackMsg(t2.id, t2.child, 3), out[:0])
				}
			}
			j := 0
			for ; j < inflight; j++ {
				step(j)
			}
			if tr.Pending() != inflight {
				b.Fatalf("Pending() = %d, want %d", tr.Pending(), inflight)
			}
			b.ReportAllocs()
			start := j
			for b.Loop() {
				step(j)
				j++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(3*(j-start)), "ns/msg")
			if tr.Pending() != inflight {
				b.Fatalf("Pending() = %d, want %d", tr.Pending(), inflight)
			}
		})
	}
}

// BenchmarkMemoryPerPendingTree holds 1e6 INITed trees that have not
// completed and reports the heap they take per tree, map overhead included.
// The figure depends on where 1e6 falls in the map's growth steps; it is a
// measurement, not a test.
func BenchmarkMemoryPerPendingTree(b *testing.B) {
	const n = 1_000_000
	var total float64
	runs := 0
	for b.Loop() {
		before := heapAlloc()
		tr, err := New(DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range n {
			tr.Handle(initMsg(r.Uint64(), r.Uint64()|1, 7), nil)
		}
		after := heapAlloc()
		if tr.Pending() != n {
			b.Fatalf("Pending() = %d, want %d", tr.Pending(), n)
		}
		runtime.KeepAlive(tr)
		total += float64(int64(after)-int64(before)) / n
		runs++
	}
	b.ReportMetric(total/float64(runs), "bytes/tree")
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
