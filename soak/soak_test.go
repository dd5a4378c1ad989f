//go:build soak

package soak

import (
	"context"
	"encoding/csv"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/workers"
)

// sample is one reading of the process.
type sample struct {
	at         time.Duration
	goroutines int
	heapMiB    float64
	openFiles  int
	logKiB     float64
	records    int64
}

// TestSoak: ACKFLOW_SOAK_DURATION (default 10m), ACKFLOW_SOAK_CRASH_EVERY
// (30s), ACKFLOW_SOAK_RATE (lines/s; default half of what the same
// topology sustains here, measured first for 10 s without crashes) and
// ACKFLOW_SOAK_OUT (soak-out) tune it. The lines are generated (see
// generated), so the input costs no disk however high the rate.
func TestSoak(t *testing.T) {
	d := envDuration(t, "ACKFLOW_SOAK_DURATION", 10*time.Minute)
	crashEvery := envDuration(t, "ACKFLOW_SOAK_CRASH_EVERY", 30*time.Second)
	out := os.Getenv("ACKFLOW_SOAK_OUT")
	if out == "" {
		out = "soak-out"
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var rate float64
	if v := os.Getenv("ACKFLOW_SOAK_RATE"); v != "" {
		var err error
		if rate, err = strconv.ParseFloat(v, 64); err != nil || rate <= 0 {
			t.Fatalf("ACKFLOW_SOAK_RATE=%q: want lines per second", v)
		}
	} else {
		peak := peakLinesPerSec(t)
		rate = peak / 2
		t.Logf("peak %.0f lines/s (exactly-once, 3 workers, no crashes); the soak runs at half: %.0f lines/s", peak, rate)
	}
	lines := uint64(rate * d.Seconds())
	job, err := generatedJob(lines, rate, 0)
	if err != nil {
		t.Fatal(err)
	}
	var logBytes atomic.Int64
	cfg := workers.DefaultConfig()
	cfg.Guarantee = workers.ExactlyOnce // checkpoints: a crash may hit any worker
	cfg.Workers = 3
	cfg.Chaos = chaos.Config{CrashEvery: crashEvery, Seed: 1}
	cfg.Logger = workers.NewLogger(countingWriter{&logBytes}, zerolog.InfoLevel)
	var records atomic.Int64
	cfg.Progress = func(p workers.Progress) { records.Store(p.Records) }

	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var ms runtimeStats
			ms.read()
			mu.Lock()
			samples = append(samples, sample{at: time.Since(start), goroutines: ms.goroutines, heapMiB: ms.heapMiB,
				openFiles: openFiles(), logKiB: float64(logBytes.Load()) / 1024, records: records.Load()})
			mu.Unlock()
		}
	}()
	sum, err := workers.RunLocal(context.Background(), job.Topology, cfg)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := oracle(lines)
	if got := job.Counts.Map(); !maps.Equal(got, want) {
		t.Errorf("the counts are wrong: %d distinct words, want %d", len(got), len(want))
	}
	if err := writeCSV(filepath.Join(out, "soak.csv"), samples); err != nil {
		t.Fatal(err)
	}
	if err := writeSVG(filepath.Join(out, "soak.svg"), samples); err != nil {
		t.Fatal(err)
	}
	t.Logf("%v at %.0f lines/s (%d lines), %d crashes, %d records (%.0f/s); samples in %s/soak.csv, plot in %s/soak.svg",
		sum.Duration.Round(time.Second), rate, lines, sum.Crashes, sum.Records, float64(sum.Records)/sum.Duration.Seconds(), out, out)

	// Flat: the last third of the run against the first third after a
	// minute's warm-up (or the first third, in a short run).
	warm := min(time.Minute, d/4)
	var steady []sample
	for _, s := range samples {
		if s.at >= warm {
			steady = append(steady, s)
		}
	}
	if len(steady) < 9 {
		t.Fatalf("only %d samples after the warm-up; run longer", len(steady))
	}
	first, last := steady[:len(steady)/3], steady[len(steady)-len(steady)/3:]
	check := func(what string, get func(sample) float64, slack func(base float64) float64) {
		a, b := median(first, get), median(last, get)
		t.Logf("%-12s first third %10.1f  last third %10.1f  max %10.1f", what, a, b, maxOf(steady, get))
		if b > a+slack(a) {
			t.Errorf("%s grew from %.1f to %.1f over the run", what, a, b)
		}
	}
	check("goroutines", func(s sample) float64 { return float64(s.goroutines) }, func(a float64) float64 { return 0.1*a + 10 })
	check("heap MiB", func(s sample) float64 { return s.heapMiB }, func(a float64) float64 { return 0.5*a + 16 })
	check("open files", func(s sample) float64 { return float64(s.openFiles) }, func(float64) float64 { return 8 })
	// The log grows by a few lines per crash and nothing per record: its
	// size over time must follow the crashes, not the records.
	logKiB := steady[len(steady)-1].logKiB - steady[0].logKiB
	crashes := float64(sum.Crashes) * float64(steady[len(steady)-1].at-steady[0].at) / float64(d)
	t.Logf("log          %.1f KiB over the steady part, about %.0f crashes", logKiB, crashes)
	if logKiB > 4*crashes+64 {
		t.Errorf("the log grew %.1f KiB over the steady part, more than the %.0f crashes explain", logKiB, crashes)
	}
}

// peakLinesPerSec runs the soak's topology for 10 s as fast as flow
// control allows, exactly-once on 3 workers without crashes.
func peakLinesPerSec(t *testing.T) float64 {
	t.Helper()
	job, err := generatedJob(0, 0, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Guarantee = workers.ExactlyOnce
	cfg.Workers = 3
	cfg.Logger = zerolog.Nop()
	sum, err := workers.RunLocal(context.Background(), job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return float64(sum.SourceRecords) / sum.Duration.Seconds()
}

type countingWriter struct{ n *atomic.Int64 }

func (w countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

type runtimeStats struct {
	goroutines int
	heapMiB    float64
}

func openFiles() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration such as 10m", name, v)
	}
	return d
}

func median(ss []sample, get func(sample) float64) float64 {
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = get(s)
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

func maxOf(ss []sample, get func(sample) float64) float64 {
	m := 0.0
	for _, s := range ss {
		m = max(m, get(s))
	}
	return m
}

func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"seconds", "goroutines", "heap_mib", "open_files", "log_kib", "records"})
	for _, s := range samples {
		w.Write([]string{fmt.Sprintf("%.0f", s.at.Seconds()), strconv.Itoa(s.goroutines), fmt.Sprintf("%.1f", s.heapMiB),
			strconv.Itoa(s.openFiles), fmt.Sprintf("%.1f", s.logKiB), strconv.FormatInt(s.records, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeSVG plots each reading against time, one panel each.
func writeSVG(path string, samples []sample) error {
	panels := []struct {
		title string
		get   func(sample) float64
	}{
		{"goroutines", func(s sample) float64 { return float64(s.goroutines) }},
		{"heap (MiB)", func(s sample) float64 { return s.heapMiB }},
		{"open files", func(s sample) float64 { return float64(s.openFiles) }},
		{"log written (KiB)", func(s sample) float64 { return s.logKiB }},
	}
	const w, h = 8 * vg.Inch, 10 * vg.Inch
	canvas := vgsvg.New(w, h)
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter}
	for i, p := range panels {
		pl := plot.New()
		pl.Title.Text = p.title
		pl.X.Label.Text = "seconds"
		pts := make(plotter.XYs, len(samples))
		for j, s := range samples {
			pts[j].X, pts[j].Y = s.at.Seconds(), p.get(s)
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		pl.Add(line)
		pl.Y.Min = 0
		pl.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *runtimeStats) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.goroutines, r.heapMiB = runtime.NumGoroutine(), float64(ms.HeapAlloc)/(1<<20)
}
