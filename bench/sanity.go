package bench

import (
	"fmt"
	"math"
	"reflect"
)

// maxRecordsPerSec is a rate no row reaches on any machine: plain Go's
// single goroutine counts about 2*10^7 words a second. A cluster row once
// printed 2.5*10^12, its run over between two polls of its clock.
const maxRecordsPerSec = 1e9

// minRowSeconds is the shortest run a row's rate can be measured over.
const minRowSeconds = 0.001

// maxBusyShare is the most of the machine's processors a run can keep
// busy: all of them, with room for the two clocks (the process's CPU time
// and the wall time) being read a few microseconds apart.
const maxBusyShare = 1.02

// Impossible lists the figures of the report that cannot be true: a
// negative, infinite or NaN number anywhere (a time, a rate, a byte count
// after an unsigned underflow), percentiles out of order, a row whose rate
// does not match its records and seconds, a memory figure larger than the
// heap the process ever had, a CPU breakdown whose parts do not add up, a
// host stall longer than the time measured, a run busier than the
// machine's processors, a median or ratio that is not
// the median or ratio of its figures.
// An empty list means every figure is possible, not that it is right.
// `ackflow bench` refuses to print a report with any.
func (r *Report) Impossible() []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	walk(reflect.ValueOf(*r), "report", func(path string, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			add("%s is %v", path, v)
		}
	})
	for _, row := range r.Rows {
		if row.RecordsPerSec > maxRecordsPerSec {
			add("row %s: %.0f records/s, beyond any machine (the row's clock failed)", row.Name, row.RecordsPerSec)
		}
		if row.Seconds > 0 && row.Seconds < minRowSeconds {
			add("row %s: timed over %.6f s, too short to be a measurement", row.Name, row.Seconds)
		}
		if row.Seconds > 0 && row.Records > 0 {
			if want := float64(row.Records) / row.Seconds; math.Abs(row.RecordsPerSec-want) > 0.05*want {
				add("row %s: %.0f records/s, but %d records in %.3f s is %.0f/s", row.Name, row.RecordsPerSec, row.Records, row.Seconds, want)
			}
		}
	}
	if r.Machine.StolenShare > 1 {
		add("%.2f of the CPU time stolen: a share cannot exceed 1", r.Machine.StolenShare)
	}
	if l := r.Latency; l.P99Ms > 0 && (l.P50Ms > l.P99Ms || l.P99Ms > l.P999Ms) {
		add("latency percentiles out of order: p50 %.2f, p99 %.2f, p99.9 %.2f ms", l.P50Ms, l.P99Ms, l.P999Ms)
	}
	if l := r.Latency; len(l.P99RunsMs) > 0 && l.P99Ms != median(l.P99RunsMs) {
		add("latency p99 %.2f ms is not the median of its runs %v", l.P99Ms, l.P99RunsMs)
	}
	if l := r.Loss; len(l.LossyRuns) > 0 && (l.LossySeconds != median(l.LossyRuns) || l.CleanSeconds != median(l.CleanRuns)) {
		add("loss row: %.3f s clean and %.3f s lossy are not the medians of the clean runs %v and the lossy runs %v", l.CleanSeconds, l.LossySeconds, l.CleanRuns, l.LossyRuns)
	}
	if l := r.Loss; l.CleanSeconds > 0 && math.Abs(l.Ratio-l.LossySeconds/l.CleanSeconds) > 1e-9*l.Ratio {
		add("loss ratio %.2f is not %.3f s lossy over %.3f s clean", l.Ratio, l.LossySeconds, l.CleanSeconds)
	}
	if n := r.Machine.CPUs; n > 0 {
		for i, c := range r.Latency.CoresRuns {
			if c > maxBusyShare*float64(n) {
				add("latency run %d kept %.2f processors busy, more than the %d the machine has", i+1, c, n)
			}
		}
	}
	if h := r.Latency.HostStalls; h.LongestMs > h.Seconds*1000 || h.LostShare > 1 || h.PerSec > 1000 {
		add("host stalls: the longest %.1f ms, %.2f of the time lost and %.0f a second over 1 ms, in %.1f s of spinning", h.LongestMs, h.LostShare, h.PerSec, h.Seconds)
	}
	if m := r.Memory; m.HeapSysBytes > 0 {
		for _, f := range []struct {
			what    string
			perItem float64
			items   int
		}{{"acker bytes per pending tree", m.AckerBytesPerTree, m.AckerTrees}, {"output log bytes per entry", m.LogBytesPerEntry, m.LogEntries}} {
			if f.perItem*float64(f.items) > float64(m.HeapSysBytes) {
				add("%s: %.1f for %d items is more than the %d bytes of heap the process had", f.what, f.perItem, f.items, m.HeapSysBytes)
			}
		}
	}
	if m := r.Memory; m.DedupBitsPerID > 0 && m.DedupBitsPerID < 1 {
		add("dedup %.2f bits per ID: a Bloom filter with a false-positive rate below 50%% needs more than one", m.DedupBitsPerID)
	}
	if m := r.Memory; m.DedupFPChecks > 0 {
		bound, _ := windowedBloomBound(m.DedupFPRate)
		switch {
		case m.DedupFPRate < 0 || m.DedupFPRate > 1:
			add("dedup false-positive rate %g is not a share of checks", m.DedupFPRate)
		case math.Abs(bound-m.DedupBitsBound) > 0.01:
			add("dedup bound of %.2f bits per ID is not what a windowed Bloom filter needs at a rate of %g (%.2f)", m.DedupBitsBound, m.DedupFPRate, bound)
		case m.DedupFPRate*float64(m.DedupFPChecks) >= 100 && m.DedupBitsPerID < bound-1:
			// 100 false positives measure the rate to a tenth, which
			// moves the bound by about a quarter of a bit.
			add("dedup %.1f bits per ID at a false-positive rate of %g: fewer than the %.1f any window of Bloom filters needs", m.DedupBitsPerID, m.DedupFPRate, bound)
		}
	}
	if b := r.Breakdown; len(b.Parts) > 0 {
		sum, ns := 0.0, 0.0
		for _, p := range b.Parts {
			sum += p.Share
			ns += p.NsPerRecord
		}
		if math.Abs(sum-1) > 0.001 || math.Abs(ns-b.NsPerRecord) > 0.001*b.NsPerRecord {
			add("CPU breakdown: shares add up to %.4f and parts to %.1f of %.1f ns per record", sum, ns, b.NsPerRecord)
		}
	}
	for _, g := range r.Goals {
		if g.Met && g.Value == 0 && g.Target != "" && g.Target[0] == '>' {
			add("goal %q met with a value of 0", g.Name)
		}
	}
	return bad
}

// walk calls f with every float and signed integer in v, named by its path.
func walk(v reflect.Value, path string, f func(string, float64)) {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f(path, v.Float())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f(path, float64(v.Int()))
	case reflect.Struct:
		for i := range v.NumField() {
			walk(v.Field(i), path+"."+v.Type().Field(i).Name, f)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}
