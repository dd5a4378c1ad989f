package ui

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ackflow/ackflow/metrics"
)

// TestFromMetricsAddsUpPerComponent: counters and pending trees add up
// over tasks, capacity is the busiest task's, histograms merge, spouts
// are told from bolts, and the topology's checkpoint and transport
// figures are read; a topology's figures do not leak into another's.
func TestFromMetricsAddsUpPerComponent(t *testing.T) {
	reg := metrics.NewRegistry()
	complete := []*metrics.LatencyHistogram{metrics.NewLatencyHistogram(metrics.CompleteLatency), metrics.NewLatencyHistogram(metrics.CompleteLatency)}
	complete[0].Observe(2 * time.Millisecond)
	complete[1].Observe(4 * time.Millisecond)
	complete[1].Observe(90 * time.Second) // above every bound
	defer reg.Add(metrics.SourceFunc(func(w *metrics.Writer) {
		for i, task := range []string{"0", "1"} {
			w.Add(metrics.Emitted, float64(100+i), "wc", "lines", task)
			w.Add(metrics.Acked, 90, "wc", "lines", task)
			w.Add(metrics.Failed, float64(3*i), "wc", "lines", task)
			w.Add(metrics.Replayed, float64(2*i), "wc", "lines", task)
			w.Add(metrics.TimedOut, float64(i), "wc", "lines", task)
			w.Add(metrics.DeadLettered, float64(i), "wc", "lines", task)
			w.Add(metrics.PendingTrees, float64(5+i), "wc", "lines", task)
			w.AddHistogram(complete[i], "wc", "lines", task)
			w.Add(metrics.Executed, 50, "wc", "count", task)
			w.Add(metrics.Emitted, 0, "wc", "count", task)
			w.Add(metrics.DuplicatesDropped, float64(7*i), "wc", "count", task)
			w.Add(metrics.Capacity, []float64{0.25, 0.75}[i], "wc", "count", task)
			w.Add(metrics.InboundQueue, 2, "wc", "count", task)
		}
		w.Add(metrics.Emitted, 1, "other", "src", "0")
		w.Add(metrics.CheckpointsCompleted, 12, "wc")
		w.Add(metrics.CheckpointsFailed, 1, "wc")
		w.Add(metrics.CheckpointEpoch, 12, "wc")
		w.Add(metrics.CheckpointSize, 2048, "wc")
		w.Add(metrics.CheckpointPause, 0.003, "wc")
		w.Add(metrics.CheckpointAge, 2, "wc")
		w.Add(metrics.FramesLost, 4, "wc")
		w.Add(metrics.FrameNACKs, 9, "wc")
		w.Add(metrics.Backpressure, 3, "wc")
		w.Add(metrics.Recovery, 0.5, "wc")
	}))()
	fams, err := reg.Prometheus().Gather()
	if err != nil {
		t.Fatal(err)
	}
	topos := FromMetrics(fams)
	if len(topos) != 2 || topos[0].Name != "other" || topos[1].Name != "wc" {
		t.Fatalf("topologies %+v", topos)
	}
	if o := topos[0]; len(o.Components) != 1 || o.Components[0].Emitted != 1 || o.Components[0].Tasks != 1 {
		t.Errorf("other: %+v", o.Components)
	}
	wc := topos[1]
	if len(wc.Components) != 2 || wc.Components[0].Name != "lines" || wc.Components[1].Name != "count" {
		t.Fatalf("components (spouts first): %+v", wc.Components)
	}
	lines, count := wc.Components[0], wc.Components[1]
	want := Component{Name: "lines", Spout: true, Tasks: 2, Emitted: 201, Acked: 180, Failed: 3, Replayed: 2, TimedOut: 1, DeadLettered: 1, Pending: 11}
	lines.Latency = Histogram{}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("lines:\n got %+v\nwant %+v", lines, want)
	}
	if h := wc.Components[0].Latency; h.Count() != 3 || math.Abs(h.Sum-90.006) > 1e-9 || h.Counts[len(h.Counts)-1] != 1 || len(h.Bounds) != len(metrics.CompleteLatency.Buckets) {
		t.Errorf("complete latency: %+v", h)
	}
	if count.Spout || count.Tasks != 2 || count.Executed != 100 || count.DuplicatesDropped != 7 || count.Capacity != 0.75 || !count.HasCapacity || count.Queue != 4 || !count.Busiest {
		t.Errorf("count: %+v", count)
	}
	ck := wc.Checkpoint
	if ck.Completed != 12 || ck.Failed != 1 || ck.Epoch != 12 || ck.Size != 2048 || ck.Pause != 3*time.Millisecond || time.Since(ck.Taken) < 2*time.Second || time.Since(ck.Taken) > time.Minute {
		t.Errorf("checkpoint: %+v", ck)
	}
	if tr := wc.Transport; tr.LostFrames != 4 || tr.FrameNACKs != 9 || tr.Backpressure != 3 {
		t.Errorf("transport: %+v", tr)
	}
	if wc.Recovery != 500*time.Millisecond {
		t.Errorf("recovery %v", wc.Recovery)
	}
}

func TestHistogramMeanAndQuantile(t *testing.T) {
	h := Histogram{Bounds: []float64{0.001, 0.01, 0.1}, Counts: []uint64{10, 80, 10, 0}, Sum: 0.5}
	if got := h.Mean(); got != 5*time.Millisecond {
		t.Errorf("mean %v", got)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0.05, 500 * time.Microsecond}, // half way through the first bucket
		{0.5, 5500 * time.Microsecond}, // 40 of the second bucket's 80
		{0.95, 55 * time.Millisecond},
		{1, 100 * time.Millisecond},
	} {
		if got := h.Quantile(c.q); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("q%v: %v, want %v", c.q, got, c.want)
		}
	}
	h.Counts = []uint64{0, 0, 0, 4} // all above every bound: the highest bound
	if got := h.Quantile(0.5); got != 100*time.Millisecond {
		t.Errorf("above the bounds: %v", got)
	}
	if (Histogram{}).Quantile(0.99) != 0 || (Histogram{}).Mean() != 0 {
		t.Error("an empty histogram has a latency")
	}
}
