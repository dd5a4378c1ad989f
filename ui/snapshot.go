package ui

import (
	"context"
	"math"
	"slices"
	"time"
)

// Source makes the snapshots the page shows.
type Source interface {
	// Snapshot gathers what the page shows now. An error means nothing
	// could be gathered; what could not be read of a part goes into
	// Snapshot.Problems instead.
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// Snapshot is everything the page shows, gathered at one instant.
type Snapshot struct {
	// Where says what the page looks at: "local run", "cluster at
	// nats://...".
	Where      string
	Taken      time.Time
	Topologies []Topology
	Workers    []Worker
	// Problems are the parts that could not be read, said for people.
	Problems []string
}

// Topology is one topology's figures.
type Topology struct {
	Name      string
	State     string // running, finished, killing, killed, stopped, failed
	Guarantee string
	// Since is when the run started (local mode) or when the current
	// generation was made (cluster mode); Ended when a local run ended.
	Since, Ended time.Time
	// Counts says what the counters cover: "since the run started",
	// "since generation 3 started".
	Counts string
	// Cluster mode: the current generation (the fencing epoch), why it was
	// made, the checkpoint it restored, and the topology's leader.
	Generation   uint64
	Reason       string
	RestoredFrom uint64
	Leader       string
	Components   []Component
	Tasks        []Task
	Checkpoint   Checkpoint
	Transport    Transport
	// Recovery is the latest failover (zero: none seen).
	Recovery time.Duration
	// Crashes counts workers that died and were replaced (local mode).
	Crashes int64
	// DeadLetters says where records given up on go, when known.
	DeadLetters string
	// Errors are what workers or the run say went wrong.
	Errors []string
	// Throughput is filled by the server from the snapshots it sampled.
	Throughput []Rate
	// Findings explain the figures (Explain fills them in).
	Findings []Finding
}

// Records is what throughput counts: records emitted by every component,
// replays included.
func (t *Topology) Records() int64 {
	var n int64
	for _, c := range t.Components {
		n += c.Emitted + c.Replayed
	}
	return n
}

// Component is one spout's or bolt's figures, summed over its tasks.
type Component struct {
	Name                                                 string
	Spout                                                bool
	Tasks                                                int
	Emitted, Executed, Acked, Failed, Replayed, TimedOut int64
	DuplicatesDropped, DedupSuspects, DeadLettered       int64
	Panics, EmitErrors                                   int64
	// Pending (spouts): trees in flight or waiting for their replay.
	Pending int64
	Queue   int64
	// Capacity (bolts) is the busiest task's, HasCapacity whether it was
	// measured at all (a finished run's gauges are gone).
	Capacity    float64
	HasCapacity bool
	// Latency is complete latency (spouts) or execute latency (bolts).
	Latency Histogram
	// Busiest marks the bolt with the highest capacity of its topology.
	Busiest bool
}

// Task is one task and where it runs.
type Task struct {
	ID        int
	Component string
	Index     int
	// Owner is the worker that runs it, Epoch the fencing epoch its frames
	// carry (cluster mode: the generation; local mode: the incarnation of
	// its worker, which grows when the worker is restarted).
	Owner   string
	Epoch   uint64
	State   string // running, starting, no report, crashed; the run's or topology's state once it ended
	Queue   int
	Spout   bool
	Pending int64
	// Capacity (bolts) as its gauge shows it, if measured now.
	Capacity    float64
	HasCapacity bool
	Done        bool // a spout whose source is exhausted
}

// Worker is one worker process (cluster mode) or worker slot (local mode).
type Worker struct {
	Name    string
	Host    string
	PID     int
	Started time.Time
	// Heartbeat is the latest sign of life: the latest renewal of the
	// slot's membership entry (local mode) or the worker's latest report
	// (cluster mode).
	Heartbeat time.Time
	// State is live (a member of the cluster, whose heartbeats renew its
	// entry; a worker slot of a running local run), crashed (a slot whose
	// replacement has not started yet), stopped (the local run ended) or
	// gone (a worker whose report outlived its membership).
	State string
	// Epoch is the incarnation of a local worker slot.
	Epoch uint64
	// Topologies are the topologies it runs tasks of, with the generation.
	Topologies []string
	Tasks      int
	Error      string
}

// Checkpoint is a topology's latest complete checkpoint.
type Checkpoint struct {
	Epoch      uint64
	Completed  int64 // taken (local mode), 0 when unknown
	Failed     int64
	Taken      time.Time // when it finished, zero when unknown
	Duration   time.Duration
	Pause      time.Duration
	Size       int64
	TotalPause time.Duration
}

// Transport are a topology's loss and flow-control counters.
type Transport struct {
	LostFrames, FrameNACKs, FramesResent, DuplicateFrames int64
	FencedFrames, FencedRecords, BadFrames, PublishErrors int64
	Discarded, Backpressure                               int64
}

// Rate is one point of the throughput sparkline.
type Rate struct {
	At      time.Time
	PerSec  float64
	Records int64
}

// Histogram is a latency histogram: observations per bucket (not
// cumulative; the last bucket is above every bound) and their sum.
type Histogram struct {
	Bounds []float64 // upper bounds, seconds
	Counts []uint64
	Sum    float64 // seconds
}

// Count is the number of observations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Mean is the average observation, or zero without any.
func (h Histogram) Mean() time.Duration { return seconds(h.MeanSeconds()) }

// MeanSeconds is the average observation in seconds (the sum over the
// count, as a query of the metrics computes it), or zero without any.
func (h Histogram) MeanSeconds() float64 {
	n := h.Count()
	if n == 0 {
		return 0
	}
	return h.Sum / float64(n)
}

// Quantile estimates the q-quantile (0..1) as Prometheus's
// histogram_quantile does: linearly within the bucket that holds it, and
// the highest bound for the bucket above every bound.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * float64(n)
	var seen uint64
	for i, c := range h.Counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i >= len(h.Bounds) {
			return seconds(h.Bounds[len(h.Bounds)-1])
		}
		lo := 0.0
		if i > 0 {
			lo = h.Bounds[i-1]
		}
		return seconds(lo + (h.Bounds[i]-lo)*(rank-float64(seen))/float64(c))
	}
	return seconds(h.Bounds[len(h.Bounds)-1])
}

// add adds o's observations; o must have the same bounds, or h none yet.
func (h *Histogram) add(bounds []float64, counts []uint64, sum float64) {
	if h.Counts == nil {
		h.Bounds, h.Counts = bounds, make([]uint64, len(counts))
	}
	if len(counts) != len(h.Counts) {
		return // another layout: a worker of another version; left out
	}
	for i, c := range counts {
		h.Counts[i] += c
	}
	h.Sum += sum
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// component returns the component named name, adding it if missing.
func (t *Topology) component(name string, spout bool) *Component {
	for i := range t.Components {
		if t.Components[i].Name == name {
			return &t.Components[i]
		}
	}
	t.Components = append(t.Components, Component{Name: name, Spout: spout})
	return &t.Components[len(t.Components)-1]
}

// markBusiest marks the bolt with the highest capacity, if any worked.
func (t *Topology) markBusiest() {
	best := -1
	for i, c := range t.Components {
		t.Components[i].Busiest = false
		if !c.Spout && c.HasCapacity && c.Capacity > 0 && (best < 0 || c.Capacity > t.Components[best].Capacity) {
			best = i
		}
	}
	if best >= 0 {
		t.Components[best].Busiest = true
	}
}

// sortTopologies orders topologies by name, and their tasks by ID.
func sortTopologies(ts []Topology) {
	slices.SortFunc(ts, func(a, b Topology) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	for i := range ts {
		slices.SortFunc(ts[i].Tasks, func(a, b Task) int { return a.ID - b.ID })
	}
}
