package wire

import (
	"runtime"
	"testing"
)

// benchRecords is the size of a full batch in these benchmarks.
const benchRecords = 500

var words = []string{"stream", "record", "bolted", "acking", "replay", "window", "kernel", "worker"}

// wordCount returns a data frame like the one a word-count splitter sends
// to a counter: stream "default", one anchor, one six-byte word, and the
// sender's task and epoch, which the frame's header carries.
func wordCount(n int) *Frame {
	f := &Frame{Kind: KindData, Src: 2, Epoch: 3, Records: make([]Record, n)}
	for i := range f.Records {
		x := uint64(i+1) * 0x9E3779B97F4A7C15 // IDs and edges look random
		f.Records[i] = Record{
			ID:      x,
			Stream:  "default",
			SrcTask: 2,
			Epoch:   3,
			Anchors: []Anchor{{Tree: x ^ 0xABCDEF, Val: x * 31}},
			Values:  []any{words[i%len(words)]},
		}
	}
	return f
}

// acks returns an ack frame like the one a busy bolt sends to an acker.
func acks(n int) *Frame {
	f := &Frame{Kind: KindAck, Acks: make([]AckMsg, n)}
	for i := range f.Acks {
		x := uint64(i+1) * 0x9E3779B97F4A7C15
		f.Acks[i] = AckMsg{Type: AckAck, Tree: x, Val: x * 31, Task: int32(i % 8)}
	}
	return f
}

// perRecord runs body in the benchmark loop and reports time and
// allocations per record, the figures that compare across batch sizes.
func perRecord(b *testing.B, records, frameBytes int, body func()) {
	b.ReportAllocs()
	b.SetBytes(int64(frameBytes))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		body()
	}
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(records)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/record")
}

func BenchmarkEncode(b *testing.B) {
	f := wordCount(benchRecords)
	buf := mustEncode(b, f)
	perRecord(b, benchRecords, len(buf), func() {
		var err error
		if buf, err = AppendFrame(buf[:0], f); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkDecode decodes into one reused Frame, as a receive loop does.
func BenchmarkDecode(b *testing.B) { benchDecodeInto(b, DecodeFrame) }

// BenchmarkDecodeInPlace is BenchmarkDecode with the strings left in the
// data (DecodeFrameInPlace, for bolts declared ZeroCopyInputs).
func BenchmarkDecodeInPlace(b *testing.B) { benchDecodeInto(b, DecodeFrameInPlace) }

// benchDecodeInto decodes word count's frame with decode into one reused
// Frame.
func benchDecodeInto(b *testing.B, decode func([]byte, *Frame) error) {
	data := mustEncode(b, wordCount(benchRecords))
	var f Frame
	perRecord(b, benchRecords, len(data), func() {
		if err := decode(data, &f); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkDecodeNewFrame decodes into a new Frame each time, for a
// receiver that hands records to other goroutines and cannot reuse them.
func BenchmarkDecodeNewFrame(b *testing.B) {
	data := mustEncode(b, wordCount(benchRecords))
	perRecord(b, benchRecords, len(data), func() {
		var f Frame
		if err := DecodeFrame(data, &f); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkEncodeAcks(b *testing.B) {
	f := acks(benchRecords)
	buf := mustEncode(b, f)
	perRecord(b, benchRecords, len(buf), func() {
		var err error
		if buf, err = AppendFrame(buf[:0], f); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkDecodeAcks(b *testing.B) {
	data := mustEncode(b, acks(benchRecords))
	var f Frame
	perRecord(b, benchRecords, len(data), func() {
		if err := DecodeFrame(data, &f); err != nil {
			b.Fatal(err)
		}
	})
}
