package ui

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"github.com/ackflow/ackflow/ui/uitest"
)

func sampleSnapshot() *Snapshot {
	now := time.Now()
	lat := Histogram{Bounds: []float64{0.001, 0.01}, Counts: []uint64{4, 0, 0}, Sum: 0.002}
	t := Topology{Name: "wordcount", State: "running", Guarantee: "exactly-once", Generation: 3, Reason: "member w3 left", Leader: "w1", Since: now.Add(-time.Minute),
		Counts: "since generation 3 started",
		Components: []Component{
			{Name: "lines", Spout: true, Tasks: 1, Emitted: 1234567, Acked: 1234000, Failed: 17, Replayed: 16, TimedOut: 1, DeadLettered: 2, Pending: 55, Latency: lat},
			{Name: "split", Tasks: 2, Executed: 1234000, Emitted: 9876543, Acked: 1234000, Capacity: 0.31, HasCapacity: true},
			{Name: "count", Tasks: 2, Executed: 9876543, Acked: 9876543, DuplicatesDropped: 321, Capacity: 0.97, HasCapacity: true, Busiest: true},
		},
		Tasks: []Task{
			{ID: 0, Component: "lines", Index: 0, Owner: "w1", Epoch: 3, State: "running", Spout: true, Pending: 55},
			{ID: 1, Component: "split", Index: 0, Owner: "w2", Epoch: 3, State: "running", Capacity: 0.31, HasCapacity: true},
			{ID: 2, Component: "count", Index: 0, Owner: "w1", Epoch: 3, State: "starting"},
		},
		Checkpoint: Checkpoint{Epoch: 41, Taken: now.Add(-time.Second), Duration: 4 * time.Millisecond, Size: 4096},
		Errors:     []string{"worker w2: <script>alert(1)</script>"},
		Throughput: []Rate{{At: now.Add(-2 * time.Second), PerSec: 10}, {At: now.Add(-time.Second), PerSec: 30}, {At: now, PerSec: 20}},
	}
	t.Findings = Explain(&t)
	return &Snapshot{Where: "cluster at nats://127.0.0.1:4222", Taken: now, Topologies: []Topology{t},
		Workers: []Worker{{Name: "w1", Host: "vm1", PID: 42, State: "live", Heartbeat: now.Add(-300 * time.Millisecond), Tasks: 2},
			{Name: "w2", State: "gone", Heartbeat: now.Add(-5 * time.Second), Error: "cannot restore"}}}
}

// TestPageShowsTheSnapshot renders a snapshot and reads the figures back
// from the parsed HTML.
func TestPageShowsTheSnapshot(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, sampleSnapshot(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	doc := parse(t, buf.String())
	if refresh := uitest.Elements(doc, func(n *html.Node) bool { return n.Data == "meta" && uitest.Attr(n, "http-equiv") == "refresh" }); len(refresh) != 1 || uitest.Attr(refresh[0], "content") != "2" {
		t.Errorf("the page does not reload itself every 2 s: %v", refresh)
	}
	sec := uitest.Elements(doc, func(n *html.Node) bool { return uitest.Attr(n, "data-topology") == "wordcount" })
	if len(sec) != 1 {
		t.Fatalf("%d sections for wordcount", len(sec))
	}
	if got := field(t, sec[0], "state"); got != "running" {
		t.Errorf("state %q", got)
	}
	if got := field(t, sec[0], "generation"); got != "3" {
		t.Errorf("generation %q", got)
	}
	rows := componentRows(t, sec[0])
	for comp, want := range map[string]map[string]string{
		"lines": {"ackflow_emitted_total": "1,234,567", "ackflow_acked_total": "1,234,000", "ackflow_failed_total": "17", "ackflow_replayed_total": "16",
			"ackflow_timed_out_total": "1", "ackflow_dead_lettered_total": "2", "ackflow_pending_trees": "55", "ackflow_complete_latency_seconds": "500 µs"},
		"split": {"ackflow_capacity_ratio": "0.31", "ackflow_executed_total": "1,234,000", "ackflow_emitted_total": "9,876,543", "ackflow_failed_total": "0"},
		"count": {"ackflow_capacity_ratio": "0.97", "ackflow_duplicates_dropped_total": "321", "ackflow_executed_total": "9,876,543"},
	} {
		for metric, v := range want {
			if got := rows[comp][metric]; got != v {
				t.Errorf("%s %s: %q, want %q", comp, metric, got, v)
			}
		}
	}
	if lat := uitest.Elements(sec[0], func(n *html.Node) bool { return uitest.Attr(n, "data-metric") == "ackflow_complete_latency_seconds" }); len(lat) != 1 || uitest.Attr(lat[0], "data-seconds") != "0.0005" {
		t.Errorf("complete latency cell: %v", lat)
	}
	busiest := uitest.Elements(sec[0], func(n *html.Node) bool { return n.Data == "tr" && uitest.Attr(n, "class") == "busiest" })
	if len(busiest) != 1 || uitest.Attr(busiest[0], "data-component") != "count" || !strings.Contains(uitest.Text(busiest[0]), "busiest") {
		t.Errorf("the busiest bolt is not flagged: %v", busiest)
	}
	tasks := uitest.Elements(sec[0], func(n *html.Node) bool { return n.Data == "tr" && uitest.Attr(n, "data-task") != "" })
	if len(tasks) != 3 {
		t.Fatalf("%d task rows", len(tasks))
	}
	for i, want := range [][2]string{{"w1", "3"}, {"w2", "3"}, {"w1", "3"}} {
		if o, e := field(t, tasks[i], "owner"), field(t, tasks[i], "epoch"); o != want[0] || e != want[1] {
			t.Errorf("task %d: owner %q epoch %q, want %q", i, o, e, want)
		}
	}
	if got := field(t, tasks[2], "state"); got != "starting" {
		t.Errorf("task 2 state %q", got)
	}
	workers := uitest.Elements(doc, func(n *html.Node) bool { return n.Data == "tr" && uitest.Attr(n, "data-worker") != "" })
	if len(workers) != 2 || uitest.Attr(workers[0], "data-worker") != "w1" || !strings.Contains(uitest.Text(workers[0]), "vm1 pid 42") ||
		field(t, workers[1], "state") != "gone" || !strings.Contains(uitest.Text(workers[1]), "cannot restore") {
		t.Errorf("workers: %d rows", len(workers))
	}
	findings := uitest.Elements(sec[0], func(n *html.Node) bool {
		return n.Data == "li" && n.Parent != nil && uitest.Attr(n.Parent, "class") == "findings"
	})
	var said []string
	for _, f := range findings {
		said = append(said, uitest.Attr(f, "class")+": "+uitest.Text(f))
	}
	all := strings.Join(said, "\n")
	for _, want := range []string{"bad: Errorworker w2: <script>alert(1)</script>", "bad: count is the bottleneck: capacity 0.97", "bad: 2 records given up on", "warn: 16 source records replayed after 17 failed tree attempts"} {
		if !strings.Contains(all, want) {
			t.Errorf("the findings lack %q:\n%s", want, all)
		}
	}
	if got := field(t, sec[0], "throughput"); got != "20" {
		t.Errorf("throughput now %q", got)
	}
	line := uitest.Elements(sec[0], func(n *html.Node) bool { return n.Data == "polyline" })
	if len(line) != 1 || len(strings.Fields(uitest.Attr(line[0], "points"))) != 3 {
		t.Errorf("the sparkline does not have a point per rate: %v", line)
	}
	if got := field(t, sec[0], "checkpoint-epoch"); got != "41" {
		t.Errorf("checkpoint epoch %q", got)
	}
	selfContained(t, doc, buf.String())
}

// selfContained checks that the page loads nothing from elsewhere and
// runs no script: it works offline.
func selfContained(t *testing.T, doc *html.Node, page string) {
	t.Helper()
	for _, n := range uitest.Elements(doc, func(n *html.Node) bool { return n.Type == html.ElementNode }) {
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed":
			t.Errorf("the page has a <%s>", n.Data)
		}
		for _, a := range n.Attr {
			if (a.Key == "src" || a.Key == "href") && (strings.Contains(a.Val, "//") || strings.HasPrefix(a.Val, "javascript:")) {
				t.Errorf("<%s %s=%q> points elsewhere", n.Data, a.Key, a.Val)
			}
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("<%s> has a script handler %s", n.Data, a.Key)
			}
		}
	}
	if strings.Contains(page, "url(") || strings.Contains(page, "@import") {
		t.Error("the style sheet loads something")
	}
}

func TestPageWithoutRefreshAndWithoutTopologies(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, &Snapshot{Where: "local run", Taken: time.Now(), Problems: []string{"some metrics could not be gathered"}}, 0); err != nil {
		t.Fatal(err)
	}
	doc := parse(t, buf.String())
	if n := uitest.Elements(doc, func(n *html.Node) bool { return n.Data == "meta" && uitest.Attr(n, "http-equiv") == "refresh" }); len(n) != 0 {
		t.Error("a paused page still reloads itself")
	}
	for _, want := range []string{"refresh paused", "No topology yet", "some metrics could not be gathered", "No worker is live"} {
		if !strings.Contains(uitest.Text(doc), want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}

// fakeSource counts its snapshots; each has more records than the last.
type fakeSource struct{ n atomic.Int64 }

func (f *fakeSource) Snapshot(context.Context) (*Snapshot, error) {
	n := f.n.Add(1)
	return &Snapshot{Where: "fake", Taken: time.Now(), Topologies: []Topology{{Name: "t", State: "running",
		Components: []Component{{Name: "s", Spout: true, Tasks: 1, Emitted: 100 * n}}}}}, nil
}

func TestServerServesThePageAndSamplesThroughput(t *testing.T) {
	defer goleak.VerifyNone(t)
	src := &fakeSource{}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ackflow_emitted_total 1\n") })
	srv, err := Listen("127.0.0.1:0", Config{Source: src, Metrics: metrics, SampleEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for src.n.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	code, body := get("/")
	doc := parse(t, body)
	if code != http.StatusOK || len(uitest.Elements(doc, func(n *html.Node) bool { return n.Data == "polyline" })) != 1 {
		t.Fatalf("%d, no sparkline after %d samples:\n%s", code, src.n.Load(), body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || body != "ackflow_emitted_total 1\n" {
		t.Errorf("/metrics: %d %q", code, body)
	}
	if code, _ := get("/?refresh=soon"); code != http.StatusBadRequest {
		t.Errorf("a bad refresh gets %d", code)
	}
	if code, body := get("/?refresh=0"); code != http.StatusOK || strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("refresh=0: %d, still reloads", code)
	}
	if code, _ := get("/nothing"); code != http.StatusNotFound {
		t.Errorf("an unknown path gets %d", code)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(srv.URL()); err == nil {
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
	srv, err := Listen(ln.Addr().String(), Config{Source: &fakeSource{}})
	if err == nil {
		srv.Close()
		t.Fatal("Listen on an address in use succeeded")
	}
	var op *net.OpError
	if !errors.As(err, &op) || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("the error does not say what is wrong: %v", err)
	}
}

func TestHistoryRates(t *testing.T) {
	h := newHistory(3)
	t0 := time.Unix(1000, 0)
	for i, recs := range []int64{0, 100, 300, 50, 150} { // a new generation counted from zero at 50
		h.add("t", t0.Add(time.Duration(i)*time.Second), recs)
	}
	var got []float64
	for _, r := range h.rates("t") {
		got = append(got, r.PerSec)
	}
	if want := []float64{200, 0, 100}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("rates %v, want %v (the oldest dropped)", got, want)
	}
	if h.rates("unknown") != nil {
		t.Error("rates of an unknown topology")
	}
}

func parse(t *testing.T, page string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// field is the text of the one element under n with data-field name.
func field(t *testing.T, n *html.Node, name string) string {
	t.Helper()
	f, ok := uitest.Field(n, name)
	if !ok {
		t.Errorf("no data-field %s", name)
	}
	return f
}

// componentRows reads the component tables: component, metric, text.
func componentRows(t *testing.T, n *html.Node) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, tr := range uitest.Elements(n, func(c *html.Node) bool { return c.Data == "tr" && uitest.Attr(c, "data-component") != "" }) {
		cells := map[string]string{}
		for _, td := range uitest.Elements(tr, func(c *html.Node) bool { return c.Data == "td" && uitest.Attr(c, "data-metric") != "" }) {
			cells[uitest.Attr(td, "data-metric")] = uitest.Text(td)
		}
		out[uitest.Attr(tr, "data-component")] = cells
	}
	return out
}
