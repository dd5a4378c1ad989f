package ui

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ackflow/ackflow/metrics"
	dto "github.com/prometheus/client_model/go"
)

// FromMetrics adds up gathered metric families (a registry's Gather, or
// a parsed scrape of /metrics) per topology and component, as
// `sum by (topology, component)` would: counters and pending trees add
// up over tasks, capacity is the busiest task's, histograms merge. It
// also reads each topology's checkpoint, transport and recovery figures.
// Families that are not ackflow's are ignored.
func FromMetrics(fams []*dto.MetricFamily) []Topology {
	topos, _ := fromMetrics(fams, time.Now())
	out := make([]Topology, 0, len(topos))
	for _, t := range topos {
		orderComponents(t, nil)
		t.markBusiest()
		out = append(out, *t)
	}
	sortTopologies(out)
	return out
}

// taskKey names a task by its labels.
type taskKey struct{ topology, component, index string }

// taskGauges are what the metrics say of one task now.
type taskGauges struct {
	capacity    float64
	hasCapacity bool
	pending     int64
	queue       int64
}

// counterFields map the per-task counter families to a component's field.
var counterFields = map[string]func(c *Component) *int64{
	metrics.Emitted.Name:           func(c *Component) *int64 { return &c.Emitted },
	metrics.Executed.Name:          func(c *Component) *int64 { return &c.Executed },
	metrics.Acked.Name:             func(c *Component) *int64 { return &c.Acked },
	metrics.Failed.Name:            func(c *Component) *int64 { return &c.Failed },
	metrics.Replayed.Name:          func(c *Component) *int64 { return &c.Replayed },
	metrics.TimedOut.Name:          func(c *Component) *int64 { return &c.TimedOut },
	metrics.DeadLettered.Name:      func(c *Component) *int64 { return &c.DeadLettered },
	metrics.DuplicatesDropped.Name: func(c *Component) *int64 { return &c.DuplicatesDropped },
	metrics.DedupSuspects.Name:     func(c *Component) *int64 { return &c.DedupSuspects },
	metrics.Panics.Name:            func(c *Component) *int64 { return &c.Panics },
	metrics.EmitErrors.Name:        func(c *Component) *int64 { return &c.EmitErrors },
}

// transportFields map the per-topology transport families.
var transportFields = map[string]func(t *Transport) *int64{
	metrics.FramesLost.Name:      func(t *Transport) *int64 { return &t.LostFrames },
	metrics.FrameNACKs.Name:      func(t *Transport) *int64 { return &t.FrameNACKs },
	metrics.FramesResent.Name:    func(t *Transport) *int64 { return &t.FramesResent },
	metrics.DuplicateFrames.Name: func(t *Transport) *int64 { return &t.DuplicateFrames },
	metrics.FencedFrames.Name:    func(t *Transport) *int64 { return &t.FencedFrames },
	metrics.FencedRecords.Name:   func(t *Transport) *int64 { return &t.FencedRecords },
	metrics.DiscardedRecs.Name:   func(t *Transport) *int64 { return &t.Discarded },
	metrics.BadFrames.Name:       func(t *Transport) *int64 { return &t.BadFrames },
	metrics.PublishErrors.Name:   func(t *Transport) *int64 { return &t.PublishErrors },
	metrics.Backpressure.Name:    func(t *Transport) *int64 { return &t.Backpressure },
}

// spoutFamilies have series for spouts only: they tell a spout from a
// bolt.
var spoutFamilies = []string{metrics.Replayed.Name, metrics.TimedOut.Name, metrics.DeadLettered.Name, metrics.PendingTrees.Name, metrics.CompleteLatency.Name}

func fromMetrics(fams []*dto.MetricFamily, now time.Time) (map[string]*Topology, map[taskKey]*taskGauges) {
	topos := map[string]*Topology{}
	tasks := map[taskKey]*taskGauges{}
	topo := func(name string) *Topology {
		t := topos[name]
		if t == nil {
			t = &Topology{Name: name}
			topos[name] = t
		}
		return t
	}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "ackflow_") {
			continue
		}
		for _, m := range f.GetMetric() {
			l := metrics.Labels(m)
			if l["topology"] == "" {
				continue
			}
			t := topo(l["topology"])
			if comp := l["component"]; comp != "" {
				c := t.component(comp, false)
				c.Spout = c.Spout || slices.Contains(spoutFamilies, name)
				k := taskKey{t.Name, comp, l["task"]}
				g := tasks[k]
				if g == nil {
					g = &taskGauges{}
					tasks[k] = g
				}
				addTaskSample(c, g, name, m)
				continue
			}
			addTopologySample(t, name, metrics.Value(m), now)
		}
	}
	// Tasks are counted from the series, which every task has.
	for k := range tasks {
		topos[k.topology].component(k.component, false).Tasks++
	}
	return topos, tasks
}

func addTaskSample(c *Component, g *taskGauges, name string, m *dto.Metric) {
	if field, ok := counterFields[name]; ok {
		*field(c) += int64(math.Round(metrics.Value(m)))
		return
	}
	switch name {
	case metrics.Capacity.Name:
		g.capacity, g.hasCapacity = metrics.Value(m), true
		c.Capacity, c.HasCapacity = max(c.Capacity, g.capacity), true
	case metrics.PendingTrees.Name:
		g.pending = int64(metrics.Value(m))
		c.Pending += g.pending
	case metrics.InboundQueue.Name:
		g.queue = int64(metrics.Value(m))
		c.Queue += g.queue
	case metrics.CompleteLatency.Name, metrics.ExecuteLatency.Name:
		bounds, counts, sum := buckets(m.GetHistogram())
		c.Latency.add(bounds, counts, sum)
	}
}

func addTopologySample(t *Topology, name string, v float64, now time.Time) {
	if field, ok := transportFields[name]; ok {
		*field(&t.Transport) += int64(math.Round(v))
		return
	}
	ck := &t.Checkpoint
	switch name {
	case metrics.CheckpointsCompleted.Name:
		ck.Completed += int64(v)
	case metrics.CheckpointsFailed.Name:
		ck.Failed += int64(v)
	case metrics.CheckpointPauseTotal.Name:
		ck.TotalPause += seconds(v)
	case metrics.CheckpointEpoch.Name:
		ck.Epoch = max(ck.Epoch, uint64(v))
	case metrics.CheckpointDuration.Name:
		ck.Duration = seconds(v)
	case metrics.CheckpointSize.Name:
		ck.Size = int64(v)
	case metrics.CheckpointPause.Name:
		ck.Pause = seconds(v)
	case metrics.CheckpointAge.Name:
		ck.Taken = now.Add(-seconds(v))
	case metrics.Recovery.Name:
		t.Recovery = max(t.Recovery, seconds(v))
	}
}

// buckets turns a Prometheus histogram's cumulative buckets into counts
// per bucket, the last one above every bound.
func buckets(h *dto.Histogram) (bounds []float64, counts []uint64, sum float64) {
	var below uint64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		bounds = append(bounds, b.GetUpperBound())
		counts = append(counts, b.GetCumulativeCount()-below)
		below = b.GetCumulativeCount()
	}
	counts = append(counts, h.GetSampleCount()-min(below, h.GetSampleCount()))
	return bounds, counts, h.GetSampleSum()
}

// orderComponents puts t's components in the order of first (the
// components in task order), then spouts before bolts, by name.
func orderComponents(t *Topology, first []string) {
	rank := func(c Component) (int, bool, string) {
		if i := slices.Index(first, c.Name); i >= 0 {
			return i, false, ""
		}
		return len(first), !c.Spout, c.Name
	}
	slices.SortStableFunc(t.Components, func(a, b Component) int {
		ia, ba, na := rank(a)
		ib, bb, nb := rank(b)
		switch {
		case ia != ib:
			return ia - ib
		case ba != bb:
			if !ba {
				return -1
			}
			return 1
		}
		return strings.Compare(na, nb)
	})
}
