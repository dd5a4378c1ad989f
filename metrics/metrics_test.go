package metrics

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestFamiliesFollowPrometheusConventions(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Families() {
		if seen[f.Name] {
			t.Errorf("%s is declared twice", f.Name)
		}
		seen[f.Name] = true
		if !strings.HasPrefix(f.Name, "ackflow_") {
			t.Errorf("%s lacks the ackflow_ prefix", f.Name)
		}
		switch total := strings.HasSuffix(f.Name, "_total"); {
		case f.Type == Counter && !total:
			t.Errorf("counter %s does not end in _total", f.Name)
		case f.Type != Counter && total:
			t.Errorf("%s %s ends in _total, which is for counters", f.Type, f.Name)
		case f.Type == Histogram && (!strings.HasSuffix(f.Name, "_seconds") || len(f.Buckets) == 0):
			t.Errorf("histogram %s must measure _seconds in buckets", f.Name)
		}
		if f.Help == "" {
			t.Errorf("%s has no help", f.Name)
		}
		if len(f.Labels) == 0 || f.Labels[0] != "topology" {
			t.Errorf("%s has labels %q; every family starts with topology", f.Name, f.Labels)
		}
	}
	if len(Names()) != len(seen) {
		t.Fatalf("Names lists %d families of %d", len(Names()), len(seen))
	}
}

// TestEveryFamilyIsDocumented checks that docs/metrics.md has a row for
// every family, with its type, labels and help.
func TestEveryFamilyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[1], "`")] = cells[2:5]
	}
	for _, f := range Families() {
		want := []string{f.Type.String(), strings.Join(f.Labels, ", "), f.Help}
		got, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("docs/metrics.md has no row for %s", f.Name)
		case strings.Join(got, "|") != strings.Join(want, "|"):
			t.Errorf("docs/metrics.md says of %s:\n%q\nthe code:\n%q", f.Name, got, want)
		}
	}
}

func TestLatencyHistogramBuckets(t *testing.T) {
	h := NewLatencyHistogram(ExecuteLatency)
	h.Observe(time.Microsecond)         // on the first bound: in it
	h.Observe(3 * time.Microsecond)     // (2.5µs, 5µs]
	h.ObserveN(30*time.Microsecond, 10) // ten of 3µs
	h.Observe(time.Minute)              // above every bound
	h.ObserveN(time.Second, 0)          // nothing
	w := newWriter()
	w.AddHistogram(h, "t", "c", "0")
	m := w.samples[key(ExecuteLatency, []string{"t", "c", "0"})].metric()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	hist := pb.GetHistogram()
	cum := map[float64]uint64{}
	for _, b := range hist.GetBucket() {
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for bound, want := range map[float64]uint64{1e-6: 1, 2.5e-6: 1, 5e-6: 12, 10: 12} {
		if cum[bound] != want {
			t.Errorf("le=%g: %d, want %d", bound, cum[bound], want)
		}
	}
	if hist.GetSampleCount() != 13 {
		t.Errorf("sample count %d, want 13", hist.GetSampleCount())
	}
	if want := 60.000034; hist.GetSampleSum() < want-1e-9 || hist.GetSampleSum() > want+1e-9 {
		t.Errorf("sum %v, want %v", hist.GetSampleSum(), want)
	}
}

// gather returns the value of every ackflow counter and gauge series, and
// the count of every histogram, by "name{label values}" (in the order of
// the label names: component, task, topology).
func gather(t *testing.T, r *Registry) map[string]float64 {
	t.Helper()
	fams, err := r.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "ackflow_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetValue())
			}
			k := f.GetName() + "{" + strings.Join(lv, ",") + "}"
			switch {
			case m.Counter != nil:
				out[k] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[k] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[k] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestRemovedSourcesKeepTheirCounters: a source that ends leaves its
// counters and histograms, a later one with the same series adds to them,
// and its gauges go with it.
func TestRemovedSourcesKeepTheirCounters(t *testing.T) {
	r := NewRegistry()
	h := NewLatencyHistogram(CompleteLatency)
	h.Observe(time.Millisecond)
	first := r.Add(SourceFunc(func(w *Writer) {
		w.Add(Emitted, 10, "t", "spout", "0")
		w.Add(PendingTrees, 5, "t", "spout", "0")
		w.AddHistogram(h, "t", "spout", "0")
	}))
	got := gather(t, r)
	if got["ackflow_emitted_total{spout,0,t}"] != 10 || got["ackflow_pending_trees{spout,0,t}"] != 5 || got["ackflow_complete_latency_seconds{spout,0,t}"] != 1 {
		t.Fatalf("live source: %v", got)
	}
	first()
	first() // a second remove changes nothing
	got = gather(t, r)
	if _, ok := got["ackflow_pending_trees{spout,0,t}"]; ok || got["ackflow_emitted_total{spout,0,t}"] != 10 || got["ackflow_complete_latency_seconds{spout,0,t}"] != 1 {
		t.Fatalf("after remove: %v", got)
	}
	second := r.Add(SourceFunc(func(w *Writer) {
		w.Add(Emitted, 3, "t", "spout", "0")
		w.Add(Emitted, 7, "t", "spout", "1")
		w.AddHistogram(h, "t", "spout", "0")
	}))
	defer second()
	got = gather(t, r)
	if got["ackflow_emitted_total{spout,0,t}"] != 13 || got["ackflow_emitted_total{spout,1,t}"] != 7 || got["ackflow_complete_latency_seconds{spout,0,t}"] != 2 {
		t.Fatalf("a later source adds to what the first left: %v", got)
	}
}

func TestServerServesAndStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := NewRegistry()
	defer r.Add(SourceFunc(func(w *Writer) { w.Add(BadFrames, 2, "t") }))()
	srv, err := Listen("127.0.0.1:0", r)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`ackflow_bad_frames_total{topology="t"} 2`, "go_goroutines", "process_cpu_seconds_total", "# TYPE ackflow_bad_frames_total counter"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get("http://" + srv.Addr() + "/metrics"); err == nil {
		t.Fatal("the server still answers after Close")
	}
}

func TestListenRefusesAnAddressInUse(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	srv, err := Listen(addr, NewRegistry())
	if err == nil {
		srv.Close()
		t.Fatalf("Listen on %s, which is in use, succeeded", addr)
	}
	var op *net.OpError
	if !errors.As(err, &op) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "free port") {
		t.Fatalf("the error does not say what is wrong and what to do: %v", err)
	}
}
