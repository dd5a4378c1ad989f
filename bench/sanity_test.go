package bench

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/workers"
)

// saneReport is a report whose every figure is possible.
func saneReport() *Report {
	return &Report{
		Rows: []Row{{Name: "plain-go", RecordsPerSec: 1e7, Records: 1e7, Seconds: 1, VsPlainGo: 1},
			{Name: "at-least-once", RecordsPerSec: 2e6, Records: 1e6, Seconds: 0.5, VsPlainGo: 0.2}},
		Loss: LossRecovery{Lines: 20000, CleanSeconds: 0.08, LossySeconds: 0.2, CleanRuns: []float64{0.09, 0.08, 0.08}, LossyRuns: []float64{0.2, 0.3, 0.18}, Ratio: 2.5},
		Latency: Latency{LoadRecordsPerSec: 1e6, P50Ms: 0.5, P99Ms: 4, P999Ms: 9, P99RunsMs: []float64{7, 3.5, 4},
			HostStalls: Stalls{Seconds: 2, PerSec: 1.5, LongestMs: 7.5, LostShare: 0.004}, CoresRuns: []float64{1.4, 1.5, 1.45}},
		Machine:  Machine{CPUs: 2},
		Recovery: Recovery{Crashes: 2, TreesCompleteMs: []float64{400}, Throughput90Ms: []float64{450}, EndedFirst: 1},
		Memory: Memory{AckerBytesPerTree: 40, LogBytesPerEntry: 250, DedupBitsPerID: 25, AckerTrees: 200_000, LogEntries: 100_000,
			HeapSysBytes: 1 << 30, DedupFPRate: 0.0007, DedupFPChecks: 2_000_000, DedupBitsBound: bound(0.0007)},
		Breakdown: Breakdown{Records: 100, CPUSeconds: 1e-4, NsPerRecord: 1000,
			Parts: []Part{{Name: "a", Share: 0.75, NsPerRecord: 750}, {Name: "b", Share: 0.25, NsPerRecord: 250}}},
		Goals: []Goal{{Name: "x", Target: ">= 1", Value: 2, Met: true}},
	}
}

// bound is windowedBloomBound's bits.
func bound(p float64) float64 {
	b, _ := windowedBloomBound(p)
	return b
}

// TestImpossibleFigures: each impossible figure is named, a sane report
// has none, and `ackflow bench` (which refuses a report with any) would
// print the sane one.
func TestImpossibleFigures(t *testing.T) {
	if bad := saneReport().Impossible(); len(bad) > 0 {
		t.Fatalf("a sane report is called impossible: %q", bad)
	}
	for _, c := range []struct {
		name, want string
		edit       func(*Report)
	}{
		{"negative recovery", "Recovery.TreesCompleteMs[0] is -1", func(r *Report) { r.Recovery.TreesCompleteMs[0] = -1 }},
		{"NaN latency", "Latency.P99Ms is NaN", func(r *Report) { r.Latency.P99Ms = math.NaN() }},
		{"infinite rate", "Rows[0].RecordsPerSec is +Inf", func(r *Report) { r.Rows[0].RecordsPerSec = math.Inf(1) }},
		{"negative lost", "Rows[1].Lost is -3", func(r *Report) { r.Rows[1].Lost = -3 }},
		{"rate not records/seconds", "row at-least-once: 3000000 records/s", func(r *Report) { r.Rows[1].RecordsPerSec = 3e6 }},
		{"rate beyond any machine (a run over between two polls)", "beyond any machine", func(r *Report) {
			r.Rows[1].Seconds, r.Rows[1].RecordsPerSec = 1e-6, float64(r.Rows[1].Records)/1e-6
		}},
		{"run too short to time", "too short to be a measurement", func(r *Report) {
			r.Rows[1].Records, r.Rows[1].Seconds, r.Rows[1].RecordsPerSec = 10, 1e-4, 1e5
		}},
		{"percentiles out of order", "percentiles out of order", func(r *Report) { r.Latency.P50Ms = 5 }},
		{"p99 not the median of its runs", "not the median of its runs", func(r *Report) { r.Latency.P99RunsMs[2] = 3.6 }},
		{"lossy time not the median of its runs", "lossy runs", func(r *Report) { r.Loss.LossyRuns[0] = 0.5 }},
		{"loss ratio not lossy over clean", "loss ratio 3.00", func(r *Report) { r.Loss.Ratio = 3 }},
		{"bytes per tree beyond the heap (an unsigned underflow)", "acker bytes per pending tree: 92233720368338.5", func(r *Report) { r.Memory.AckerBytesPerTree = 92233720368338.5 }},
		{"log bytes beyond the heap", "output log bytes per entry", func(r *Report) { r.Memory.LogBytesPerEntry = 1 << 20 }},
		{"dedup under a bit", "bits per ID", func(r *Report) { r.Memory.DedupBitsPerID = 0.5 }},
		{"false-positive rate over 1", "is not a share of checks", func(r *Report) { r.Memory.DedupFPRate = 1.5 }},
		{"dedup bound not the formula's", "is not what a windowed Bloom filter needs", func(r *Report) { r.Memory.DedupBitsBound = 16 }},
		{"dedup below what any windowed Bloom filter needs", "fewer than the 21.9 any window", func(r *Report) { r.Memory.DedupBitsPerID = 16 }},
		{"stall longer than the measurement", "host stalls: the longest 2500.0 ms", func(r *Report) { r.Latency.HostStalls.LongestMs = 2500 }},
		{"more time lost than spun", "1.20 of the time lost", func(r *Report) { r.Latency.HostStalls.LostShare = 1.2 }},
		{"busier than the machine's processors", "latency run 2 kept 2.30 processors busy, more than the 2", func(r *Report) { r.Latency.CoresRuns[1] = 2.3 }},
		{"more than all the CPU stolen", "CPU time stolen", func(r *Report) { r.Machine.StolenShare = 1.5 }},
		{"breakdown not adding up", "CPU breakdown", func(r *Report) { r.Breakdown.Parts[0].Share = 0.5 }},
		{"goal met by nothing", `goal "x" met with a value of 0`, func(r *Report) { r.Goals[0].Value = 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := saneReport()
			c.edit(r)
			bad := r.Impossible()
			if !strings.Contains(strings.Join(bad, "\n"), c.want) {
				t.Fatalf("got %q, want a complaint containing %q", bad, c.want)
			}
		})
	}
}

// TestBackToWithoutRecovery: a crash after which the rate never came back
// (the input ran out) is not a figure: it is counted apart.
func TestBackToWithoutRecovery(t *testing.T) {
	if d, ok := backTo(nil, 0, progressEvery, 1); ok || d != 0 {
		t.Fatalf("backTo with no samples = %v, %v", d, ok)
	}
}

// TestBackToCountsWholeSamples: the sample that straddles the crash is
// mostly the rate before it and does not count; the recovery ends with
// the first sample wholly after the crash that is back at the target,
// which for a crash that did not dent the rate is the first whole one.
func TestBackToCountsWholeSamples(t *testing.T) {
	const crash = 1000 * time.Millisecond
	samples := func(rates ...float64) []workers.Progress {
		var ps []workers.Progress
		for i, r := range rates {
			ps = append(ps, workers.Progress{Elapsed: time.Duration(908+100*i) * time.Millisecond, RecordsPerSec: r})
		}
		return ps
	}
	for _, c := range []struct {
		name  string
		rates []float64 // samples ending at 908, 1008, 1108, ... ms
		want  float64
		ok    bool
	}{
		{"dip", []float64{100, 100, 40, 50, 95, 100}, 308, true},
		{"no dip", []float64{100, 100, 100, 100}, 108, true},
		{"never back", []float64{100, 100, 10, 20}, 0, false},
	} {
		d, ok := backTo(samples(c.rates...), crash, progressEvery, 90)
		if d != c.want || ok != c.ok {
			t.Errorf("%s: backTo = %v ms, %v; want %v, %v", c.name, d, ok, c.want, c.ok)
		}
	}
}

// TestPartOf: a sample goes to the innermost frame with a part, so an
// allocation counts for the code that made it.
func TestPartOf(t *testing.T) {
	for _, c := range []struct {
		stack []string
		want  string
	}{
		{[]string{"runtime.mallocgc", "github.com/ackflow/ackflow/wire.(*decoder).record", "github.com/ackflow/ackflow/workers.(*Worker).run"}, "codec (frames)"},
		{[]string{"github.com/ackflow/ackflow/dedup.(*Filter).probe", "github.com/ackflow/ackflow/dedup.(*Filter).Check", "github.com/ackflow/ackflow/workers.(*boltExec).dispatch"}, "dedup (Bloom filter, exact ring)"},
		{[]string{"strings.FieldsFunc", "github.com/ackflow/ackflow/examples/wordcount.SplitWords", "github.com/ackflow/ackflow/workers.(*boltExec).execute"}, "user code (split, count)"},
		{[]string{"runtime.gcBgMarkWorker"}, goRuntime},
		{[]string{"github.com/nats-io/nats-server/v2/server.(*client).readLoop"}, "NATS server (embedded)"},
		// As the profiler names nats.go's functions.
		{[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.Write", "github.com/nats-io/nats%2ego.(*Conn).flusher"}, "NATS client"},
		{[]string{"runtime.memmove", "github.com/nats-io/nats%2ego.(*Conn).publish", "github.com/ackflow/ackflow/workers.(*outbox).transmit"}, "NATS client"},
	} {
		if got := partOf(c.stack); got != c.want {
			t.Errorf("partOf(%q) = %q, want %q", c.stack, got, c.want)
		}
	}
}

// TestCPUTimes: on Linux the machine's CPU times are read, and what was
// stolen is part of the total.
func TestCPUTimes(t *testing.T) {
	j, ok := cpuTimes()
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	if !ok || j.total == 0 || j.steal > j.total {
		t.Fatalf("cpuTimes() = %+v, %v; want a total and steal within it", j, ok)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 4}, 4}, {[]float64{4, 1, 9, 2}, 3}, {[]float64{2, 2, 8}, 2}} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for i := range in {
			if in[i] != c.xs[i] {
				t.Fatalf("median reordered its input: %v, was %v", c.xs, in)
			}
		}
	}
}

// TestWindowedBloomBound: the bound is the formula's least over the
// number of generations, as docs/performance.md tabulates it for a rate of
// 0.00067 (30.4 bits at 2, 25.0 at 3, 21.98 at 9 and 10, the least), and a real
// windowed filter measured the way the suite measures it needs at least
// that many bits for the rate it measures.
func TestWindowedBloomBound(t *testing.T) {
	bits, g := windowedBloomBound(0.00067)
	if math.Abs(bits-21.98) > 0.005 || g != 9 {
		t.Fatalf("the bound at 0.00067 is %.3f bits with %d generations, want 21.98 with 9", bits, g)
	}
	if b, _ := windowedBloomBound(0); b != 0 {
		t.Fatalf("the bound at a rate of 0 is %v, want 0 (none: no rate measured)", b)
	}
	for _, c := range []struct {
		p    float64
		gens int
	}{{0.01, 2}, {0.01, 4}, {0.001, 3}, {0.05, 8}} {
		cfg := dedup.DefaultConfig()
		cfg.Window, cfg.Exact, cfg.FPRate, cfg.Generations = 1<<14, 1<<10, c.p, c.gens
		f, err := dedup.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rate := falsePositiveRate(f, cfg.Window, 200_000)
		bits := f.Stats().BitsPerID
		least, _ := windowedBloomBound(rate)
		t.Logf("FPRate %v, %d generations: %.1f bits per ID at a measured rate of %.5f; the bound %.1f", c.p, c.gens, bits, rate, least)
		if rate <= 0 || rate > 2*c.p {
			t.Fatalf("FPRate %v, %d generations: measured a false-positive rate of %v", c.p, c.gens, rate)
		}
		if bits < least {
			t.Fatalf("FPRate %v, %d generations: %.1f bits per ID at a measured rate of %v, below the bound of %.1f", c.p, c.gens, bits, rate, least)
		}
	}
}
