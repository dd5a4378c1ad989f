package workers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// scrape is one page of /metrics, parsed.
type scrape map[string]*dto.MetricFamily

// scrapeURL gets and parses the text exposition at url.
func scrapeURL(client *http.Client, url string) (scrape, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// gatherRegistry gathers a registry without HTTP.
func gatherRegistry(t *testing.T, reg *metrics.Registry) scrape {
	t.Helper()
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := scrape{}
	for _, f := range fams {
		s[f.GetName()] = f
	}
	return s
}

// sum adds up the series of a family whose labels include want.
func (s scrape) sum(name string, want map[string]string) float64 {
	var total float64
	f := s[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		l := metrics.Labels(m)
		for k, v := range want {
			if l[k] != v {
				continue next
			}
		}
		total += metrics.Value(m)
	}
	return total
}

// series names every series of the ackflow families: name{labels}.
func (s scrape) series() map[string]float64 {
	out := map[string]float64{}
	for name, f := range s {
		if !strings.HasPrefix(name, "ackflow_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for k, v := range metrics.Labels(m) {
				ls = append(ls, k+"="+v)
			}
			sort.Strings(ls)
			out[name+"{"+strings.Join(ls, ",")+"}"] = metrics.Value(m)
		}
	}
	return out
}

// TestMetricsMatchTheSummaryUnderChaos runs a topology with a stateful bolt
// at-least-once with checkpoints, lost, duplicated and failed records and
// worker crashes, with a metrics server that the test scrapes over HTTP
// every 50ms. During the run every exported family shows up and no counter
// goes backwards, although workers are restarted; at the end the counters
// equal the run's summary.
func TestMetricsMatchTheSummaryUnderChaos(t *testing.T) {
	defer goleak.VerifyNone(t)
	reg := metrics.NewRegistry()
	srv, err := metrics.Listen("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	url := "http://" + srv.Addr() + "/metrics"

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes int
	seen := map[string]bool{}    // families seen during the run
	high := map[string]float64{} // the highest value of every counter series so far
	var problems []string        // what the scrapes during the run found wrong
	var tasks map[string]bool    // component/task of ackflow_emitted_total in the last scrape
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s, err := scrapeURL(client, url)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			scrapes++
			for name := range s {
				seen[name] = true
			}
			for k, v := range s.series() {
				name := k[:strings.IndexByte(k, '{')]
				if s[name].GetType() == dto.MetricType_GAUGE {
					continue
				}
				if v < high[k] {
					problems = append(problems, fmt.Sprintf("%s went back from %v to %v", k, high[k], v))
				}
				high[k] = v
			}
			tasks = map[string]bool{}
			if f := s["ackflow_emitted_total"]; f != nil {
				for _, m := range f.GetMetric() {
					l := metrics.Labels(m)
					if l["topology"] != "metrics" {
						problems = append(problems, fmt.Sprintf("a series of topology %q", l["topology"]))
					}
					tasks[l["component"]+"/"+l["task"]] = true
				}
			}
		}
	}()

	const n = 4000
	var mu sync.Mutex
	result := map[string]int64{}
	topo := checkpointTopology(t, "metrics", n, 3*time.Second, result, &mu)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   3,
		Chaos:     chaos.Config{Drop: 0.03, Dup: 0.02, Fail: 0.01, CrashEvery: 700 * time.Millisecond, Seed: 47},
		Configure: func(c *workers.Config) {
			c.CheckpointEvery = 150 * time.Millisecond
			c.MaxAttempts = 0
			c.Metrics = reg
			c.Logger = zerolog.Nop()
		},
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	count := sum.Component("count")
	t.Logf("%v, %d scrapes; crashes %d, recoveries %v; checkpoints %+v; count: %d duplicates dropped, %d suspects",
		sum.Duration.Round(time.Millisecond), scrapes, sum.Crashes, sum.Recoveries, sum.Checkpoints, count.DuplicatesDropped, count.Suspects)
	if sum.Crashes == 0 || count.DuplicatesDropped == 0 || sum.Checkpoints.Taken == 0 || scrapes < 10 {
		t.Fatalf("crashes %d, duplicates dropped %d, checkpoints %d, scrapes during the run %d: the test proves nothing",
			sum.Crashes, count.DuplicatesDropped, sum.Checkpoints.Taken, scrapes)
	}
	for _, p := range problems {
		t.Error(p)
	}
	for _, name := range metrics.Names() {
		if !seen[name] {
			t.Errorf("%s never appeared during the run", name)
		}
	}
	want := []string{"count/0", "count/1", "numbers/0", "pre/0", "pre/1", "sink/0"}
	if got := sortedKeys(tasks); !slices.Equal(got, want) {
		t.Errorf("tasks with series %v, want %v", got, want)
	}

	end, err := scrapeURL(client, url)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range end.series() {
		if v < high[k] {
			t.Errorf("%s went back from %v to %v at the end", k, high[k], v)
		}
	}
	check := func(what string, got float64, want int64) {
		t.Helper()
		if got != float64(want) {
			t.Errorf("%s: metrics say %v, the summary %d", what, got, want)
		}
	}
	for _, c := range sum.Components {
		l := map[string]string{"topology": "metrics", "component": c.Name}
		check(c.Name+" emitted", end.sum("ackflow_emitted_total", l), c.Emitted)
		check(c.Name+" acked", end.sum("ackflow_acked_total", l), c.Acked)
		check(c.Name+" failed", end.sum("ackflow_failed_total", l), c.Failed)
		if c.Spout {
			check(c.Name+" replayed", end.sum("ackflow_replayed_total", l), c.Replayed)
			check(c.Name+" timed out", end.sum("ackflow_timed_out_total", l), c.TimedOut)
			check(c.Name+" dead-lettered", end.sum("ackflow_dead_lettered_total", l), c.DeadLettered)
			if end.sum("ackflow_complete_latency_seconds", l) == 0 {
				t.Errorf("%s: no complete latency was observed", c.Name)
			}
			continue
		}
		check(c.Name+" executed", end.sum("ackflow_executed_total", l), c.Executed)
		if end.sum("ackflow_execute_latency_seconds", l) == 0 {
			t.Errorf("%s: no execute latency was observed", c.Name)
		}
	}
	cl := map[string]string{"topology": "metrics", "component": "count"}
	check("duplicates dropped", end.sum("ackflow_duplicates_dropped_total", cl), count.DuplicatesDropped)
	check("dedup suspects", end.sum("ackflow_dedup_suspects_total", cl), count.Suspects)
	check("re-emitted", end.sum("ackflow_dedup_reemitted_total", cl), count.ReEmitted)
	tl := map[string]string{"topology": "metrics"}
	check("transferred", end.sum("ackflow_transferred_total", tl), sum.NATSRecordsOut)
	check("NATS messages", end.sum("ackflow_nats_sent_messages_total", tl), sum.NATSMessagesOut)
	check("bad frames", end.sum("ackflow_bad_frames_total", tl), sum.BadFrames)
	check("fenced frames", end.sum("ackflow_fenced_frames_total", tl), sum.FencedFrames)
	check("fenced records", end.sum("ackflow_fenced_records_total", tl), sum.FencedRecords)
	check("discarded records", end.sum("ackflow_discarded_records_total", tl), sum.Discarded)
	check("duplicate frames", end.sum("ackflow_duplicate_frames_total", tl), sum.DuplicateFrames)
	check("NACKs", end.sum("ackflow_frame_nacks_total", tl), sum.NACKs)
	check("resent", end.sum("ackflow_frames_resent_total", tl), sum.Resent)
	check("lost frames", end.sum("ackflow_frames_lost_total", tl), sum.LostFrames)
	check("checkpoints", end.sum("ackflow_checkpoints_completed_total", tl), int64(sum.Checkpoints.Taken))
	check("checkpoints abandoned", end.sum("ackflow_checkpoints_failed_total", tl), int64(sum.Checkpoints.Abandoned))
	// Gauges end with the run; counters stay.
	if _, ok := end["ackflow_pending_trees"]; ok {
		t.Error("the pending trees of a run that ended are still shown")
	}
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestNodeMetricsShowTasksFencingAndFailover runs a topology on two nodes
// with a metrics registry each. Between them they show every task with its
// topology, component and task labels; a frame of another generation sent
// to a task is counted as fenced by the node that runs it; when one node
// leaves, the other runs every task of the next generation, shows the
// failover's recovery time, and none of its counters goes back although
// its tasks were stopped and started again.
func TestNodeMetricsShowTasksFencingAndFailover(t *testing.T) {
	verifyNoLeaks(t)
	const name, count = "metrics-nodes", 3000
	var mu sync.Mutex
	result := map[string]int64{}
	build := func(map[string]string) (*topology.Topology, error) {
		return checkpointTopology(t, name, count, 5*time.Second, result, &mu), nil
	}
	n := startNodes(t, name, build)
	regs := map[string]*metrics.Registry{"n1": metrics.NewRegistry(), "n2": metrics.NewRegistry()}
	n.startWith("n1", regs["n1"])
	n.startWith("n2", regs["n2"])
	ctx := context.Background()
	if err := n.reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "exactly-once", CheckpointEvery: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	want := []string{"count/0", "count/1", "numbers/0", "pre/0", "pre/1", "sink/0"}
	// live are the tasks whose gauges a node shows: those it runs now.
	live := func(s scrape) map[string]bool {
		tasks := map[string]bool{}
		if f := s["ackflow_inbound_queue_frames"]; f != nil {
			for _, m := range f.GetMetric() {
				l := metrics.Labels(m)
				if l["topology"] != name {
					t.Fatalf("a series of topology %q", l["topology"])
				}
				tasks[l["component"]+"/"+l["task"]] = true
			}
		}
		return tasks
	}
	var owner string // the node that runs pre/0
	deadline := time.Now().Add(30 * time.Second)
	for {
		union := map[string]bool{}
		for m, reg := range regs {
			for task := range live(gatherRegistry(t, reg)) {
				union[task] = true
				if task == "pre/0" {
					owner = m
				}
			}
		}
		if slices.Equal(sortedKeys(union), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes show tasks %v, want %v", sortedKeys(union), want)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A frame of another generation, to pre/0 on its owner.
	js, err := jetstream.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := cluster.NewKVGenerations(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	gen, _, err := gens.Current(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := build(nil)
	cfg := workers.DefaultConfig()
	cfg.Guarantee = workers.ExactlyOnce
	refs, err := workers.Tasks(topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pre := -1
	for _, r := range refs {
		if r.Component == "pre" && r.Index == 0 {
			pre = r.ID
		}
	}
	fenced := func() float64 {
		return gatherRegistry(t, regs[owner]).sum("ackflow_fenced_frames_total", map[string]string{"topology": name})
	}
	before := fenced()
	stale := &wire.Frame{Kind: wire.KindData, Src: 0, Epoch: workers.FrameEpoch(gen.Number+100, 0), Seq: 1, Records: []wire.Record{
		{ID: 42, Stream: topology.DefaultStream, SrcTask: 0, Epoch: workers.FrameEpoch(gen.Number+100, 0), Anchors: []wire.Anchor{{Tree: 7, Val: 9}}, Values: []any{int64(1)}},
	}}
	data, err := wire.AppendFrame(nil, stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Publish(fmt.Sprintf("ackflow.%s.task.%d", name, pre), data); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); fenced() <= before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not count the frame of generation %d as fenced", owner, gen.Number+100)
		}
	}

	// n2 leaves: n1 runs everything in the next generation.
	n1 := gatherRegistry(t, regs["n1"]).series()
	n.stop("n2")
	deadline = time.Now().Add(30 * time.Second)
	for {
		s := gatherRegistry(t, regs["n1"])
		if slices.Equal(sortedKeys(live(s)), want) && s.sum("ackflow_recovery_seconds", map[string]string{"topology": name}) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after n2 left, n1 shows tasks %v and recovery %v", sortedKeys(live(s)), s.sum("ackflow_recovery_seconds", nil))
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.await(time.Minute, func(s string) bool { return s == cluster.StateFinished })
	end := gatherRegistry(t, regs["n1"])
	for k, v := range end.series() {
		if old, ok := n1[k]; ok && v < old && end[k[:strings.IndexByte(k, '{')]].GetType() != dto.MetricType_GAUGE {
			t.Errorf("n1's %s went back from %v to %v across the generations", k, old, v)
		}
	}
	if end.sum("ackflow_checkpoints_completed_total", nil) == 0 {
		t.Error("n1 led the last generation but shows no checkpoint")
	}
	t.Logf("pre/0 ran on %s; recovery after n2 left: %.3f s; n1 emitted %v records", owner,
		end.sum("ackflow_recovery_seconds", nil), end.sum("ackflow_emitted_total", nil))
	n.stopAll()
	mu.Lock()
	defer mu.Unlock()
	expectCounted(t, result, count)
}
