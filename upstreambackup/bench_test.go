package upstreambackup

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ackflow/ackflow/wire"
)

// BenchmarkAppendComplete logs one input with 10 outputs per op and
// completes the tree of the input logged inflight ops earlier, so the log
// holds inflight entries throughout, as under load. ns/op is ns per input.
func BenchmarkAppendComplete(b *testing.B) {
	for _, inflight := range []int{0, 10_000, 200_000} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			outs := make([]Output, 10)
			for i := range outs {
				outs[i] = Output{Dst: int32(i % 3), Rec: wire.Record{
					ID: uint64(i), Stream: "default", SrcTask: 1, Epoch: 1,
					Anchors: []wire.Anchor{{Tree: 1, Val: 2}},
					Values:  []any{"word", int64(i)},
				}}
			}
			l, err := New(DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			trees := make([]uint64, 1)
			// Tree IDs are random in the runtime; a multiplicative hash of
			// the counter spreads them the same way without a generator.
			tree := func(i uint64) uint64 { return i * 0x9e3779b97f4a7c15 }
			step := func(i uint64) {
				trees[0] = tree(i)
				l.Append(i, trees, outs, 400, now)
				if i >= uint64(inflight) {
					l.Complete(tree(i-uint64(inflight)), nil)
				}
			}
			var i uint64
			for ; i < uint64(inflight); i++ {
				step(i)
			}
			b.ReportAllocs()
			for b.Loop() {
				step(i)
				i++
			}
			if l.Len() != inflight {
				b.Fatalf("Len() = %d, want %d", l.Len(), inflight)
			}
		})
	}
}

// BenchmarkMemoryPerEntry logs 1e5 inputs with one output of one value each
// and reports the heap the log takes per input: entry, map slots, outputs.
// The records' Values are built before the baseline is read, because they
// exist whether or not the log keeps them; the log's own cost is the figure.
func BenchmarkMemoryPerEntry(b *testing.B) {
	const n = 100_000
	values := make([][]any, n)
	for i := range values {
		values[i] = []any{int64(i)}
	}
	trees := make([]uint64, 1)
	outs := make([]Output, 1)
	now := time.Unix(1_700_000_000, 0)
	var total float64
	runs := 0
	for b.Loop() {
		before := heapAlloc()
		l, err := New(Config{MaxEntries: n, MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			trees[0] = uint64(i) * 0x9e3779b97f4a7c15
			outs[0] = Output{Dst: 2, Rec: wire.Record{ID: uint64(i), Stream: "default", SrcTask: 1, Epoch: 1, Values: values[i]}}
			l.Append(uint64(i), trees, outs, 16, now)
		}
		after := heapAlloc()
		runtime.KeepAlive(l)
		total += float64(after-before) / n
		runs++
	}
	b.ReportMetric(total/float64(runs), "bytes/entry")
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
