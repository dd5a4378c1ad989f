package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "ackflow bench (%s profile) on %s, %d CPUs, %s, %s\n", r.Profile, orUnknown(r.Machine.CPUModel), r.Machine.CPUs, r.Machine.GoVersion, r.Machine.Date)
	if r.Machine.StolenKnown {
		fmt.Fprintf(w, "CPU time stolen by the hypervisor during the run: %.1f%%\n", 100*r.Machine.StolenShare)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\trecords/s\tvs plain Go\tvs raw NATS\tvs JetStream chain\tack msgs/record\tlost\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%s\t%d\t\n", row.Name, row.RecordsPerSec, row.VsPlainGo, row.VsRawNATS, row.VsJetStream, optional(row.AckMessagesPerRecord), row.Lost)
	}
	tw.Flush()
	for _, u := range r.Unavailable {
		fmt.Fprintf(w, "  (not measured: %s)\n", u)
	}
	l := r.Latency
	fmt.Fprintf(w, "\ncomplete latency at %.0f records/s (50%% of the at-least-once peak), median of %d runs: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms", l.LoadRecordsPerSec, len(l.P99RunsMs), l.P50Ms, l.P99Ms, l.P999Ms)
	if len(l.P99RunsMs) > 1 {
		sep := " (p99 of each run: "
		for _, p := range l.P99RunsMs {
			fmt.Fprintf(w, "%s%.2f", sep, p)
			sep = ", "
		}
		fmt.Fprint(w, " ms)")
	}
	fmt.Fprintln(w)
	if len(l.CoresRuns) > 0 {
		fmt.Fprintf(w, "processors busy in the latency runs (the process's CPU time over their time, NATS server included): %s of %d\n", fixed2(l.CoresRuns), r.Machine.CPUs)
	}
	if h := l.HostStalls; h.Seconds > 0 {
		fmt.Fprintf(w, "host stalls before the latency runs (a thread spinning on each processor for %.0f s): %.1f over 1 ms a second per processor, the longest %.1f ms, %.2f%% of the time lost\n", h.Seconds, h.PerSec, h.LongestMs, 100*h.LostShare)
	}
	fmt.Fprint(w, "\nscaling (at-least-once, dedup off):\n")
	for _, s := range r.Parallelism {
		fmt.Fprintf(w, "  parallelism %d: %.0f records/s\n", s.Parallelism, s.RecordsPerSec)
	}
	for _, s := range r.RecordSize {
		fmt.Fprintf(w, "  %5d-byte records: %.0f records/s, %.1f MiB/s\n", s.RecordBytes, s.RecordsPerSec, s.MiBPerSec)
	}
	if rl := r.RawLarge; rl.MiBPerSec > 0 {
		fmt.Fprintf(w, "  raw NATS, %d-byte messages: %.0f msg/s, %.1f MiB/s\n", rl.RecordBytes, rl.RecordsPerSec, rl.MiBPerSec)
	}
	rc := r.Recovery
	fmt.Fprintf(w, "\nrecovery at 50%% of the dedup peak, 3 workers: %d crashes; every tree complete after %s ms; throughput back to 90%% after %s; %d words lost\n",
		rc.Crashes, floats(rc.TreesCompleteMs), endedFirst(floats(rc.Throughput90Ms), rc.EndedFirst), rc.Lost)
	ls := r.Loss
	fmt.Fprintf(w, "\nlost frames: word count of %d random lines, 3 workers, 30 s message timeout, median of %d runs each: %.2f s clean, %.2f s with %s (%.1fx; runs %s and %s s); in all, %d frames dropped, %d resent, %d trees timed out, %d words lost, %d duplicated\n",
		ls.Lines, len(ls.LossyRuns), ls.CleanSeconds, ls.LossySeconds, ls.Chaos, ls.Ratio, fixed2(ls.CleanRuns), fixed2(ls.LossyRuns), ls.FramesDropped, ls.Resent, ls.TimedOut, ls.Lost, ls.Duplicated)
	ck := r.Checkpoints
	fmt.Fprintf(w, "\ncheckpoints (exactly-once at 50%% of the dedup peak, every %.0f ms): %d taken; spouts paused p50 %.2f ms, max %.2f ms; %d bytes each; %d words lost\n",
		ck.IntervalMs, ck.Taken, ck.PauseP50Ms, ck.PauseMaxMs, ck.Bytes, ck.Lost)
	if mc := r.Metrics; mc.OffRecordsPerSec > 0 {
		fmt.Fprintf(w, "\nmetrics (at-least-once, scraped over HTTP every %.0f ms, best of %d runs each): %.0f records/s on, %.0f off (%.2f); %d scrapes, %d bytes a page\n",
			mc.ScrapeEveryMs, metricsRuns, mc.OnRecordsPerSec, mc.OffRecordsPerSec, mc.Ratio, mc.Scrapes, mc.PageBytes)
	}
	m := r.Memory
	fmt.Fprintf(w, "\nmemory: acker %.1f bytes per pending tree", m.AckerBytesPerTree)
	if m.LogBytesPerEntry > 0 {
		fmt.Fprintf(w, ", output log %.1f bytes per entry", m.LogBytesPerEntry)
	}
	if m.DedupBitsPerID > 0 {
		fmt.Fprintf(w, ", dedup %.1f bits per remembered ID", m.DedupBitsPerID)
		if m.DedupFPChecks > 0 {
			fmt.Fprintf(w, " at a false-positive rate of %.5f (measured over %d never-seen IDs; a window of Bloom filters needs at least %.1f bits at that rate)",
				m.DedupFPRate, m.DedupFPChecks, m.DedupBitsBound)
		}
	}
	fmt.Fprintln(w)
	if b := r.Breakdown; len(b.Parts) > 0 {
		fmt.Fprintf(w, "\nwhere the CPU time goes (at-least-once word count, dedup on; %.0f ns of CPU per record, all cores, NATS server included):\n", b.NsPerRecord)
		for _, p := range b.Parts {
			fmt.Fprintf(w, "  %-46s %5.1f%%  %6.0f ns/record\n", p.Name, 100*p.Share, p.NsPerRecord)
		}
	}
	fmt.Fprint(w, "\ngoals (DESIGN.md section 11; reported, not asserted):\n")
	for _, g := range r.Goals {
		mark := "missed"
		if g.Met {
			mark = "met"
		}
		fmt.Fprintf(w, "  %-52s %-9s %10.2f  %s\n", g.Name, g.Target, g.Value, mark)
		if g.Note != "" {
			fmt.Fprintf(w, "      %s\n", g.Note)
		}
	}
	if h := r.Latency.HostStalls; h.Seconds > 0 && h.LostShare > noisyHost {
		fmt.Fprintf(w, "\nthe host was noisy: a thread spinning on each processor before the latency runs lost %.1f%% of its time in gaps (%.1f a second over 1 ms, the longest %.1f ms), where a quiet host loses under 1%%. Every tree in flight waits out such a gap, so the p99 goal, and less so the ratios, say as much about the host as about ackflow here: run `ackflow bench` again when the host is quieter.\n",
			100*h.LostShare, h.PerSec, h.LongestMs)
	}
}

// noisyHost is the share of a spinning thread's time lost in gaps above
// which the report says that the host was noisy. Runs on this project's
// 2-core hosts lost 0.4-1.0%, and 15-17% while another program kept both
// processors busy for 300 ms of every second (docs/performance.md, round
// twenty-one).
const noisyHost = 0.03

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Chart turns the report into the SVG chart's data.
func (r *Report) Chart() Chart {
	var c Chart
	for _, row := range r.Rows {
		c.Throughput = append(c.Throughput, ThroughputBar{Name: row.Name, RecordsPerSec: row.RecordsPerSec})
	}
	c.Latency = []LatencyBar{{"p50", r.Latency.P50Ms}, {"p99", r.Latency.P99Ms}, {"p99.9", r.Latency.P999Ms}}
	return c
}

func optional(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// floats lists whole numbers (milliseconds), fixed2 numbers with two
// decimals (seconds).
func floats(vs []float64) string { return list(vs, "%.0f") }
func fixed2(vs []float64) string { return list(vs, "%.2f") }

func list(vs []float64, format string) string {
	if len(vs) == 0 {
		return "-"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(parts, ", ")
}

// endedFirst adds the crashes near the end of a run, after which the input
// ran out before the rate could come back: there is nothing to measure.
func endedFirst(measured string, n int) string {
	switch {
	case n == 0:
		return measured + " ms"
	case measured == "-":
		return fmt.Sprintf("n/a for %d (the run ended first)", n)
	}
	return fmt.Sprintf("%s ms; n/a for %d (the run ended first)", measured, n)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}
