package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/embednats"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/ui/uitest"
)

// output is a command's stdout or stderr, read while it runs.
type output struct{ testbuf.Buffer }

// await polls out until re matches, and returns the first group.
func (o *output) await(t *testing.T, re *regexp.Regexp, d time.Duration, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(o.String()); m != nil {
			return m[len(m)-1]
		}
		select {
		case err := <-done:
			t.Fatalf("the command ended (%v) before printing %s:\n%s", err, re, o.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing matched %s after %v:\n%s", re, d, o.String())
		}
	}
}

// command runs the CLI with args until ctx ends; its error arrives on
// the channel.
func command(ctx context.Context, args ...string) (stdout, stderr *output, done chan error) {
	stdout, stderr, done = &output{}, &output{}, make(chan error, 1)
	root := NewRoot(Bundled())
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	go func() { done <- root.ExecuteContext(ctx) }()
	return stdout, stderr, done
}

// chromium finds a Chromium for the browser test. Without one the test
// is skipped, except in CI (CI is set), which must run it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const msg = "no Chromium on PATH: install it (apt-get install chromium) to run the status page's browser test"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI must run it, and .ci/run installs it")
	}
	t.Skip(msg)
	return ""
}

// artifacts is where the browser test saves its screenshots: the
// directory $ACKFLOW_ARTIFACTS, where they outlive the test for people to
// look at (ACKFLOW_ARTIFACTS=/tmp/shots go test -run Chromium ./cli/), or
// else a test directory removed at the end.
func artifacts(t *testing.T) string {
	dir := os.Getenv("ACKFLOW_ARTIFACTS")
	if dir == "" {
		// Nothing is left behind unless asked for.
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cell is one figure of the page's component tables, as the DOM has it.
type cell struct {
	Topology, Component, Metric, Agg, Text, Seconds string
}

// readCells is what the test's browser reads of the page (the page
// itself runs no script).
const readCells = `[...document.querySelectorAll("tr[data-component] td[data-metric]")].map(td => ({
  Topology: td.closest("section[data-topology]").dataset.topology,
  Component: td.closest("tr").dataset.component,
  Metric: td.dataset.metric, Agg: td.dataset.agg || "sum",
  Text: td.innerText.trim(), Seconds: td.dataset.seconds || ""}))`

// TestStatusPageInChromium runs word count under chaos with the status
// page on, loads the page in headless Chromium while it runs and after
// it ended, and checks every figure of the component tables against
// /metrics, scraped once the run ended so that nothing moves between the
// two reads: the page and /metrics must agree exactly. Screenshots of
// both moments go to the artifacts directory.
func TestStatusPageInChromium(t *testing.T) {
	defer goleak.VerifyNone(t)
	chrome := chromium(t)
	dir := artifacts(t)
	const lines = 6000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, done := command(ctx, "run", "wordcount", "--random-lines", strconv.Itoa(lines), "--rate", "600", "--workers", "2",
		"--chaos", "drop=0.02,dup=0.01,fail=0.01,seed=7", "--quiet", "--log-level", "error",
		"--dead-letters", filepath.Join(t.TempDir(), "dead.jsonl"), "--ui", "127.0.0.1:0", "--ui-keep", "5m")
	defer func() {
		cancel() // ends --ui-keep
		if err := <-done; err != nil {
			t.Errorf("run: %v\n%s", err, stderr.String())
		}
	}()
	page := stderr.await(t, regexp.MustCompile(`serving the status page on (http://\S+/) `), 30*time.Second, done)

	// Chromium leaves its singleton socket's directory in TMPDIR when it
	// exits: a TMPDIR of the test's own keeps /tmp clean.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 1100), chromedp.Env("TMPDIR="+t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	browser, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The browser starts with the first action, which must have no
	// timeout (it would stop the browser); the later ones have one.
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("cannot start %s: %v", chrome, err)
	}
	load := func(name string) (string, []cell) {
		t.Helper()
		lctx, lcancel := context.WithTimeout(browser, time.Minute)
		defer lcancel()
		section := `section[data-topology="wordcount"]`
		err := chromedp.Do(lctx, chromedp.Navigate(page+"?refresh=0"), chromedp.WaitVisible(section+" table.bolts"))
		state, err2 := chromedp.Run(lctx, chromedp.Text(section+` [data-field="state"]`))
		cells, err3 := chromedp.Run(lctx, chromedp.Evaluate[[]cell](readCells))
		png, err4 := chromedp.Run(lctx, chromedp.FullScreenshot(100))
		for _, e := range []error{err, err2, err3, err4} {
			if e != nil {
				t.Fatalf("loading %s in Chromium: %v", page, e)
			}
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Fatalf("the screenshot is not a PNG")
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the page, %s: %s", state, path)
		return state, cells
	}

	// The page reloads itself: its time changes without a navigation,
	// and the reloads bring the throughput sparkline once two samples
	// are in.
	refreshed := func() error {
		rctx, rcancel := context.WithTimeout(browser, time.Minute)
		defer rcancel()
		if err := chromedp.Do(rctx, chromedp.Navigate(page)); err != nil {
			return err
		}
		first, err := chromedp.Run(rctx, chromedp.Text(`[data-field="taken"]`))
		if err != nil {
			return err
		}
		for {
			// A reload may come between two reads: errors are retried.
			now, err := chromedp.Run(rctx, chromedp.Text(`[data-field="taken"]`))
			if err == nil && now != first {
				lines, err := chromedp.Run(rctx, chromedp.Evaluate[int](`document.querySelectorAll(".throughput polyline").length`))
				if err == nil && lines == 1 {
					return nil
				}
			}
			select {
			case <-rctx.Done():
				return fmt.Errorf("still at %s: %w", first, rctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if err := refreshed(); err != nil {
		t.Fatalf("the page did not reload itself with a sparkline: %v", err)
	}
	if state, cells := load("status-page-running.png"); state != "running" || len(cells) == 0 {
		t.Fatalf("during the run the page says %q with %d figures; a run of %d lines at 600/s should still be going", state, len(cells), lines)
	}
	// The summary is printed once the run's metrics are final.
	stdout.await(t, regexp.MustCompile(`counts against the generator's: (0 occurrences missing, 0 counted more than once)`), 2*time.Minute, done)
	state, cells := load("status-page-finished.png")
	if state != "finished" {
		t.Fatalf("after the run the page says %q", state)
	}
	scrape := scrapeMetrics(t, strings.TrimSuffix(page, "/")+"/metrics")

	got := map[string]int64{} // component/metric: the page's figure
	for _, c := range cells {
		key := c.Component + " " + c.Metric
		want := scrape.figure(c.Topology, c.Component, c.Metric)
		switch c.Agg {
		case "sum":
			n, err := strconv.ParseInt(strings.ReplaceAll(c.Text, ",", ""), 10, 64)
			if err != nil || float64(n) != want.sum {
				t.Errorf("%s: the page shows %q, /metrics has %v", key, c.Text, want.sum)
			}
			got[key] = n
		case "max":
			if !want.present {
				if c.Text != "—" {
					t.Errorf("%s: the page shows %q, /metrics has no series", key, c.Text)
				}
				continue
			}
			if c.Text != strconv.FormatFloat(want.max, 'f', 2, 64) {
				t.Errorf("%s: the page shows %q, /metrics has %v", key, c.Text, want.max)
			}
		case "mean":
			mean, err := strconv.ParseFloat(c.Seconds, 64)
			// Both add the same float sums in the same order (the
			// registry's, by label values): the same mean to the bit.
			if err != nil || want.count == 0 || mean != want.sum/want.count {
				t.Errorf("%s: the page's mean is %q s, /metrics has %v/%v", key, c.Seconds, want.sum, want.count)
			}
		default:
			t.Errorf("%s: unknown aggregation %q", key, c.Agg)
		}
	}
	// The figures are those of the run, and chaos did something for the
	// page to show: failures, replays, duplicates dropped.
	if got["lines ackflow_emitted_total"] != lines || got["lines ackflow_acked_total"]+got["lines ackflow_dead_lettered_total"] != lines {
		t.Errorf("the spout emitted %d and acked %d of %d lines", got["lines ackflow_emitted_total"], got["lines ackflow_acked_total"], lines)
	}
	for _, k := range []string{"lines ackflow_failed_total", "lines ackflow_replayed_total", "count ackflow_duplicates_dropped_total", "split ackflow_failed_total"} {
		if got[k] == 0 {
			t.Errorf("%s is 0 on the page: chaos did nothing, the test proves nothing", k)
		}
	}
	if len(got) < 15 {
		t.Errorf("the page shows only %d figures: %v", len(got), got)
	}
}

// scraped are the series of a scrape of /metrics.
type scraped map[string][]series

type series struct {
	labels     map[string]string
	value      float64 // counters and gauges
	sum, count float64 // histograms
}

// figure adds up what a page's cell covers: the series of metric with
// the topology and component labels, as PromQL's sum and max would.
type figure struct {
	present         bool
	sum, max, count float64
}

func (s scraped) figure(topology, component, metric string) figure {
	var f figure
	for _, ser := range s[metric] {
		if ser.labels["topology"] != topology || ser.labels["component"] != component {
			continue
		}
		if !f.present || ser.value > f.max {
			f.max = ser.value
		}
		f.present = true
		if ser.count > 0 {
			f.sum += ser.sum
			f.count += ser.count
			continue
		}
		f.sum += ser.value
	}
	return f
}

// fetch GETs url on a fresh connection and returns the body of a 200.
func fetch(t *testing.T, url string) []byte {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %v", url, resp.StatusCode, err)
	}
	return body
}

func scrapeMetrics(t *testing.T, url string) scraped {
	t.Helper()
	body := fetch(t, url)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s does not parse: %v", url, err)
	}
	out := scraped{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ser := series{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				ser.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				ser.value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				ser.value = m.GetGauge().GetValue()
			case m.Histogram != nil:
				ser.sum, ser.count = m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())
			default:
				continue
			}
			out[name] = append(out[name], ser)
		}
	}
	if len(out["ackflow_emitted_total"]) == 0 {
		t.Fatalf("%s has no ackflow_emitted_total:\n%s", url, body)
	}
	return out
}

// TestUIShowsAClusterTopology runs two worker processes' nodes in this
// process, submits word count, and reads the page of ackflow ui over
// HTTP: it lists the topology in its current generation, every task with
// the owner and fencing epoch the generation gives it, the leader, the
// figures the workers report, the latest checkpoint, and both workers.
func TestUIShowsAClusterTopology(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	var dones []chan error
	defer func() {
		cancel()
		for _, done := range dones {
			if err := <-done; err != nil {
				t.Errorf("a command ended with %v", err)
			}
		}
	}()
	for _, w := range []string{"w1", "w2"} {
		_, _, done := command(ctx, "worker", "--nats", srv.URL(), "--name", w, "--status-every", "100ms", "--log-level", "error")
		dones = append(dones, done)
	}
	sub, subErr, done := command(ctx, "submit", "wordcount", "--nats", srv.URL(), "--set", "rate=200", "--wait", "1m")
	if err := <-done; err != nil {
		t.Fatalf("submit: %v\n%s%s", err, sub.String(), subErr.String())
	}
	_, uiErr, done := command(ctx, "ui", "--nats", srv.URL(), "--addr", "127.0.0.1:0")
	dones = append(dones, done)
	page := uiErr.await(t, regexp.MustCompile(`status page of the cluster at \S+ on (http://\S+/) `), 30*time.Second, done)

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := cluster.NewKVGenerations(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Poll until the page shows a generation whose every task runs, with
	// both workers in it, and figures from the spout.
	deadline := time.Now().Add(time.Minute)
	for {
		doc, body := fetchPage(t, page)
		g, _, err := gens.Current(ctx, "wordcount")
		if err != nil {
			t.Fatal(err)
		}
		problem := clusterPageDiffers(doc, g)
		if problem == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page does not show generation %d as it is: %s\n%s", g.Number, problem, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterPageDiffers says how the page differs from what generation g
// and its workers should show, or "".
func clusterPageDiffers(doc *html.Node, g cluster.Generation) string {
	secs := uitest.Elements(doc, func(n *html.Node) bool { return uitest.Attr(n, "data-topology") == "wordcount" })
	if len(secs) != 1 {
		return "no section for wordcount"
	}
	sec := secs[0]
	if s := fieldOf(sec, "state"); s != "running" {
		return "the topology is " + s
	}
	if gen := fieldOf(sec, "generation"); gen != strconv.FormatUint(g.Number, 10) {
		return "generation " + gen
	}
	if !strings.Contains(uitest.Text(sec), "leader w") {
		return "no leader"
	}
	// Cluster mode takes a checkpoint every second; the page reads its
	// manifest for when it was taken, how long it took and its size.
	if ck := uitest.Elements(sec, func(n *html.Node) bool { return n.Data == "dl" && uitest.Attr(n, "class") == "pairs checkpoint" }); fieldOf(sec, "checkpoint-epoch") == "" ||
		len(ck) != 1 || !strings.Contains(uitest.Text(ck[0]), "took") || !strings.Contains(uitest.Text(ck[0]), "size") {
		return "no latest checkpoint with its manifest's figures"
	}
	owners := map[string]bool{}
	tasks := uitest.Elements(sec, func(n *html.Node) bool { return n.Data == "tr" && uitest.Attr(n, "data-task") != "" })
	if len(tasks) != len(g.Assignment) {
		return fmt.Sprintf("%d tasks of %d", len(tasks), len(g.Assignment))
	}
	for _, tr := range tasks {
		id, _ := strconv.Atoi(uitest.Attr(tr, "data-task"))
		owner, epoch, state := fieldOf(tr, "owner"), fieldOf(tr, "epoch"), fieldOf(tr, "state")
		if owner != g.Assignment[id] || epoch != strconv.FormatUint(g.Number, 10) || !strings.HasPrefix(state, "running") {
			return fmt.Sprintf("task %d: owner %s epoch %s %s; the generation says %s, %d", id, owner, epoch, state, g.Assignment[id], g.Number)
		}
		owners[owner] = true
	}
	if len(owners) != 2 {
		return fmt.Sprintf("the tasks run on %d workers", len(owners))
	}
	for _, w := range []string{"w1", "w2"} {
		rows := uitest.Elements(doc, func(n *html.Node) bool { return uitest.Attr(n, "data-worker") == w })
		if len(rows) != 1 || fieldOf(rows[0], "state") != "live" || fieldOf(rows[0], "heartbeat") == "never" {
			return "worker " + w + " is not shown live with a heartbeat"
		}
	}
	for _, comp := range []string{"lines", "split", "count"} {
		rows := uitest.Elements(sec, func(n *html.Node) bool { return uitest.Attr(n, "data-component") == comp })
		if len(rows) != 1 {
			return "no row for " + comp
		}
		emitted := uitest.Elements(rows[0], func(n *html.Node) bool { return uitest.Attr(n, "data-metric") == "ackflow_emitted_total" })
		if comp != "count" && (len(emitted) != 1 || uitest.Text(emitted[0]) == "0") {
			return comp + " has emitted nothing"
		}
	}
	return ""
}

func fetchPage(t *testing.T, url string) (*html.Node, string) {
	t.Helper()
	body := fetch(t, url)
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return doc, string(body)
}

// fieldOf is the text of the first element under n with data-field name.
func fieldOf(n *html.Node, name string) string {
	f, _ := uitest.Field(n, name)
	return f
}
