package workers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// TestLocalViewShowsTheRun watches a local run under crash chaos through
// a LocalView: it shows nothing before the run, the workers and where
// every task runs while it goes on, a crashed worker's replacement as
// its next incarnation (the epoch of its tasks), and at the end the
// outcome and per-component figures that equal the summary's and, for
// the latencies, the metrics'.
func TestLocalViewShowsTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	view := workers.NewLocalView()
	if _, ok := view.Status(); ok {
		t.Fatal("a view shows a run before one started")
	}
	reg := metrics.NewRegistry()
	var mu sync.Mutex
	result := map[string]int64{}
	topo := checkpointTopology(t, "view", 3000, 2*time.Second, result, &mu)
	type outcome struct {
		sum *workers.Summary
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
			Guarantee: workers.AtLeastOnce,
			Workers:   3,
			Chaos:     chaos.Config{Drop: 0.02, Fail: 0.01, CrashEvery: 400 * time.Millisecond, Seed: 11},
			Configure: func(c *workers.Config) {
				c.View, c.Metrics, c.Logger = view, reg, zerolog.Nop()
				c.CheckpointEvery = 150 * time.Millisecond
			},
		})
		done <- outcome{sum, err}
	}()
	var running []workers.LocalStatus
	var end outcome
wait:
	for {
		select {
		case end = <-done:
			break wait
		case <-time.After(20 * time.Millisecond):
			if st, ok := view.Status(); ok && st.State == workers.LocalRunning {
				running = append(running, st)
			}
		}
	}
	if end.err != nil {
		t.Fatal(end.err)
	}
	sum := end.sum
	if len(running) < 5 || sum.Crashes == 0 {
		t.Fatalf("%d views while running, %d crashes: the test proves nothing", len(running), sum.Crashes)
	}
	for _, st := range running {
		checkPlacement(t, st)
	}
	st, ok := view.Status()
	if !ok || st.State != workers.LocalFinished || st.Err != "" || st.Ended.Before(st.Started) || st.Topology != "view" || st.Guarantee != workers.AtLeastOnce {
		t.Fatalf("after the run the view says %+v", st)
	}
	checkPlacement(t, st)
	var restarted bool
	for _, w := range st.Workers {
		restarted = restarted || w.Incarnation > 1
	}
	if !restarted || st.Crashes != int64(sum.Crashes) {
		t.Errorf("%d crashes, the view shows %d and incarnations %+v", sum.Crashes, st.Crashes, st.Workers)
	}
	if len(st.Components) != len(sum.Components) {
		t.Fatalf("components %+v", st.Components)
	}
	fams := gatherRegistry(t, reg)
	for i, c := range sum.Components {
		v := st.Components[i]
		if v.Component != c.Name || v.Spout != c.Spout || v.Tasks != c.Tasks || v.Emitted != c.Emitted || v.Acked != c.Acked || v.Failed != c.Failed ||
			v.Replayed != c.Replayed || v.TimedOut != c.TimedOut || v.Executed != c.Executed || v.DuplicatesDropped != c.DuplicatesDropped ||
			v.DedupSuspects != c.Suspects || v.DeadLettered != c.DeadLettered || v.Panics != c.Panics || v.Pending != 0 {
			t.Errorf("the view's %+v\nthe summary's %+v", v, c)
		}
		var n uint64
		for _, k := range v.Latency.Counts {
			n += k
		}
		family := "ackflow_execute_latency_seconds"
		if c.Spout {
			family = "ackflow_complete_latency_seconds"
		}
		if want := fams.sum(family, map[string]string{"topology": "view", "component": c.Name}); n == 0 || float64(n) != want ||
			len(v.Latency.Counts) != len(workers.LatencyBounds(c.Spout))+1 {
			t.Errorf("%s: the view has %d latencies in %d buckets, the metrics %v", c.Name, n, len(v.Latency.Counts), want)
		}
	}
}

// checkPlacement checks that every task runs on a worker slot of the
// view, with that slot's incarnation as its epoch.
func checkPlacement(t *testing.T, st workers.LocalStatus) {
	t.Helper()
	tasks := make([]int, len(st.Workers))
	for _, task := range st.Tasks {
		if task.Worker < 0 || task.Worker >= len(st.Workers) || task.Epoch != st.Workers[task.Worker].Incarnation || task.Epoch == 0 {
			t.Fatalf("task %+v on workers %+v", task, st.Workers)
		}
		tasks[task.Worker]++
	}
	for i, w := range st.Workers {
		if w.Slot != i || w.Tasks != tasks[i] || w.Heartbeat.IsZero() {
			t.Fatalf("worker %+v; %d tasks run on it", w, tasks[i])
		}
	}
}
