package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/internal/heapfloor"
	"github.com/ackflow/ackflow/internal/hugepages"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
)

// BenchmarkWordCount runs the suite's word count (8 copies of the bundled
// text, 2 workers) once per iteration in each mode, reporting records/s:
// the whole runtime's cost per record, for a CPU profile
// (go test -run X -bench WordCount -cpuprofile cpu.out ./bench/).
//
// ACKFLOW_BENCH_COPIES=32 runs it on the suite's input instead. Compare
// dedup changes that way: with 8 copies a count task checks about 400,000
// IDs, fewer than the filter's first generation takes, so its checks read
// one Bloom generation instead of three and most of the exact ring is
// never allocated (docs/performance.md, round sixteen).
func BenchmarkWordCount(b *testing.B) {
	asTheBinary(b)
	s := benchSuite(b)
	for _, m := range []struct {
		name    string
		g       workers.Guarantee
		noDedup bool
	}{{"at-most-once", workers.AtMostOnce, true}, {"at-least-once", workers.AtLeastOnce, true}, {"at-least-once-dedup", workers.AtLeastOnce, false}} {
		b.Run(m.name, func(b *testing.B) {
			var records, secs, startMs, endMs, worstStartMs float64
			cpu0 := cpuNow()
			for b.Loop() {
				sum, lostWords, err := s.wordCount(context.Background(), wordcount.Config{}, func(c *workers.Config) { c.Guarantee, c.NoDedup = m.g, m.noDedup })
				if err != nil {
					b.Fatal(err)
				}
				if lostWords > 0 {
					b.Fatalf("lost %d words", lostWords)
				}
				records += float64(sum.Records)
				secs += sum.Duration.Seconds()
				startMs += ms(sum.FirstRecordAfter)
				endMs += ms(sum.EndedAfterLastTree)
				worstStartMs = max(worstStartMs, ms(sum.FirstRecordAfter))
			}
			b.ReportMetric(records/secs, "records/s")
			// A run's start-up (submission to the first record, the mean
			// and the longest) and, with trees to track, how long it goes
			// on after its last tree completes.
			b.ReportMetric(startMs/float64(b.N), "start-ms")
			b.ReportMetric(worstStartMs, "worst-start-ms")
			if endMs > 0 {
				b.ReportMetric(endMs/float64(b.N), "end-ms")
			}
			// CPU time of the whole process (both workers, the NATS server)
			// per record: steadier than records/s on a shared machine, where
			// a slow spell stretches a run but not the work it does.
			b.ReportMetric(float64(cpuNow()-cpu0)/records, "cpu-ns/record")
		})
	}
}

// asTheBinary sets up the process as cli.Main does for the ackflow binary
// and `ackflow bench`, until b ends: the heap floor and GOGC 400, and the
// heap advised for transparent huge pages. Without them a benchmark
// measures another process: collections every few milliseconds, and a
// TLB miss on most reads of a dedup filter's megabytes.
func asTheBinary(b *testing.B) {
	gc := debug.SetGCPercent(100)
	floor := heapfloor.Start(256<<20, 400)
	huge, err := hugepages.Start(50*time.Millisecond, 256<<20)
	if err != nil {
		b.Logf("the heap goes on with 4 KiB pages: %v", err)
	}
	b.Cleanup(func() { huge.Stop(); floor.Stop(); debug.SetGCPercent(gc) })
}

// schedHist is the runtime's histogram of the time goroutines spent
// runnable before they ran (/sched/latencies:seconds).
type schedHist struct{ *metrics.Float64Histogram }

func schedLatencies() schedHist {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return schedHist{s[0].Value.Float64Histogram()}
}

// quantile is the q quantile of what h counted since before, in seconds:
// the upper bound of the bucket it falls in.
func (h schedHist) quantile(before schedHist, q float64) float64 {
	var total uint64
	for i := range h.Counts {
		total += h.Counts[i] - before.Counts[i]
	}
	var seen uint64
	for i := range h.Counts {
		seen += h.Counts[i] - before.Counts[i]
		if total > 0 && float64(seen) >= q*float64(total) {
			return h.Buckets[i+1]
		}
	}
	return 0
}

// cpuNow is processCPU for the benchmarks, which run where it is known.
func cpuNow() time.Duration {
	cpu, _ := processCPU()
	return cpu
}

// BenchmarkPacedWordCount runs the latency row's word count (at-least-once,
// dedup off, 2 workers) with the spouts paced to a few rates, reporting
// the complete latency's p50 and p99 per rate: how the tail grows with the
// load, and with -trace, where the records wait
// (go test -run X -bench PacedWordCount -benchtime 1x -trace t.out ./bench/,
// then go tool trace -pprof=sched t.out).
func BenchmarkPacedWordCount(b *testing.B) {
	s := benchSuite(b)
	for _, lps := range []float64{15_000, 30_000, 55_000, 110_000} {
		b.Run(fmt.Sprintf("lines=%.0f", lps), func(b *testing.B) {
			var p50, p99 time.Duration
			for b.Loop() {
				sum, lostWords, err := s.wordCount(context.Background(), wordcount.Config{LinesPerSec: lps}, func(c *workers.Config) { c.Guarantee, c.NoDedup = workers.AtLeastOnce, true })
				if err != nil {
					b.Fatal(err)
				}
				if lostWords > 0 {
					b.Fatalf("lost %d words", lostWords)
				}
				l := sum.Component("lines")
				p50, p99 = max(p50, l.LatencyP50), max(p99, l.LatencyP99)
				b.ReportMetric(sum.RecordsPerSec, "records/s")
				// NATS messages cost system calls on both sides and wake-ups:
				// at these loads they, not the records, are most of the CPU.
				b.ReportMetric(float64(sum.NATSMessagesOut)/sum.Duration.Seconds(), "nats-msgs/s")
			}
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p99), "p99-ms")
		})
	}
}

// benchSuite is a suite over an embedded NATS server that lives as long as
// b, with the word count's input (8 copies of the bundled text, or
// ACKFLOW_BENCH_COPIES) ready.
func benchSuite(b *testing.B) *suite {
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	s := &suite{dir: b.TempDir(), rep: &Report{}, url: srv.URL(), opts: []nats.Option{srv.InProcess()}}
	copies := 8
	if v := os.Getenv("ACKFLOW_BENCH_COPIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("ACKFLOW_BENCH_COPIES=%q: want a positive number of copies of the text", v)
		}
		copies = n
	}
	if err := s.prepareInput(copies); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPacedCores runs the latency row's word count on the suite's
// input (32 copies of the text) at an eighth, a quarter and half of its
// peak and below, with the `ackflow` binary's heap floor, reporting the
// cores the process used (CPU time over the run's duration) next to p50,
// p99 (the worst run's and the median of the runs) and NATS messages/s:
// what a paced run costs, which docs/performance.md (round eleven)
// compares before and after the spout's held frames, and how the tail
// moves (round seventeen: go test -run X -bench
// 'PacedCores/lines=240000' -benchtime 5x ./bench/, of each build).
func BenchmarkPacedCores(b *testing.B) {
	asTheBinary(b)
	s := benchSuite(b)
	if err := s.prepareInput(32); err != nil { // the suite's input, not benchSuite's 8 copies
		b.Fatal(err)
	}
	for _, lps := range []float64{30_000, 60_000, 120_000, 240_000} {
		b.Run(fmt.Sprintf("lines=%.0f", lps), func(b *testing.B) {
			var cores, p50, p99, msgs float64
			var p99s []float64
			sched0 := schedLatencies()
			for b.Loop() {
				cpu0 := cpuNow()
				sum, lostWords, err := s.wordCount(context.Background(), wordcount.Config{LinesPerSec: lps}, func(c *workers.Config) { c.Guarantee, c.NoDedup = workers.AtLeastOnce, true })
				if err != nil {
					b.Fatal(err)
				}
				if lostWords > 0 {
					b.Fatalf("lost %d words", lostWords)
				}
				secs := sum.Duration.Seconds()
				l := sum.Component("lines")
				cores += float64(cpuNow()-cpu0) / float64(sum.Duration)
				p50, p99 = max(p50, ms(l.LatencyP50)), max(p99, ms(l.LatencyP99))
				p99s = append(p99s, ms(l.LatencyP99))
				msgs += float64(sum.NATSMessagesOut) / secs
			}
			b.ReportMetric(cores/float64(b.N), "cores")
			b.ReportMetric(msgs/float64(b.N), "nats-msgs/s")
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(p99, "p99-ms")
			// The worst run's p99 is set by one slow spell of the host; the
			// median of several runs is what two builds are compared by.
			b.ReportMetric(median(p99s), "p99-median-ms")
			// How long goroutines waited for a processor, over all runs:
			// a tree crosses several such waits (docs/performance.md,
			// round nineteen).
			sched := schedLatencies()
			b.ReportMetric(sched.quantile(sched0, 0.99)*1e6, "sched-p99-us")
			b.ReportMetric(sched.quantile(sched0, 0.999)*1e6, "sched-p999-us")
		})
	}
}
