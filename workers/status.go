package workers

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ackflow/ackflow/metrics"
)

// Status while a run goes on: what a worker process reports to the
// cluster (MemberStatus, member.go) and what a local run shows through a
// LocalView, both for the status page (package ui). Everything here is
// read from the atomics the tasks update anyway, when asked: nothing runs
// per record, and a report costs a pass over the process's tasks.

// ComponentStatus is what one component's tasks in a process did: in
// cluster mode a member's tasks in its generation (the counters start at
// zero with each generation), summed over them. The counters mean what the
// metrics of the same name mean (docs/metrics.md).
type ComponentStatus struct {
	Component         string `json:"component"`
	Spout             bool   `json:"spout,omitempty"`
	Tasks             int    `json:"tasks"`
	Emitted           int64  `json:"emitted"`
	Executed          int64  `json:"executed,omitempty"`
	Acked             int64  `json:"acked"`
	Failed            int64  `json:"failed"`
	Replayed          int64  `json:"replayed,omitempty"`
	TimedOut          int64  `json:"timed_out,omitempty"`
	DuplicatesDropped int64  `json:"duplicates_dropped,omitempty"`
	DedupSuspects     int64  `json:"dedup_suspects,omitempty"`
	DeadLettered      int64  `json:"dead_lettered,omitempty"`
	Panics            int64  `json:"panics,omitempty"`
	EmitErrors        int64  `json:"emit_errors,omitempty"`
	// Pending (spouts) is the trees in flight or waiting for their replay,
	// Queue the frames waiting in the tasks' inboxes.
	Pending int64 `json:"pending,omitempty"`
	Queue   int64 `json:"queue,omitempty"`
	// Capacity (bolts) is the busiest task's: the fraction of the last
	// second it spent processing inputs.
	Capacity float64 `json:"capacity,omitempty"`
	// Latency is complete latency (spouts) or execute latency (bolts), in
	// the buckets of metrics.CompleteLatency or metrics.ExecuteLatency.
	Latency *LatencyStatus `json:"latency,omitempty"`
}

// LatencyStatus is a latency histogram: the observations per bucket of
// its metrics family (not cumulative; the last bucket is above every
// bound) and their sum.
type LatencyStatus struct {
	Counts     []uint64 `json:"counts"`
	SumSeconds float64  `json:"sum_seconds"`
}

func (l *LatencyStatus) clone() *LatencyStatus {
	if l == nil {
		return nil
	}
	return &LatencyStatus{Counts: slices.Clone(l.Counts), SumSeconds: l.SumSeconds}
}

// TransportStatus are a process's loss and flow-control counters for one
// topology (the metrics of the same names).
type TransportStatus struct {
	LostFrames      int64 `json:"lost_frames,omitempty"`
	FrameNACKs      int64 `json:"frame_nacks,omitempty"`
	FramesResent    int64 `json:"frames_resent,omitempty"`
	DuplicateFrames int64 `json:"duplicate_frames,omitempty"`
	FencedRecords   int64 `json:"fenced_records,omitempty"`
	Discarded       int64 `json:"discarded_records,omitempty"`
	BadFrames       int64 `json:"bad_frames,omitempty"`
	PublishErrors   int64 `json:"publish_errors,omitempty"`
	Backpressure    int64 `json:"backpressure,omitempty"`
}

// add adds o's figures to c's: counters and latencies add up, the
// busiest task's capacity wins.
func (c *ComponentStatus) add(o ComponentStatus) {
	c.Tasks += o.Tasks
	c.Emitted += o.Emitted
	c.Executed += o.Executed
	c.Acked += o.Acked
	c.Failed += o.Failed
	c.Replayed += o.Replayed
	c.TimedOut += o.TimedOut
	c.DuplicatesDropped += o.DuplicatesDropped
	c.DedupSuspects += o.DedupSuspects
	c.DeadLettered += o.DeadLettered
	c.Panics += o.Panics
	c.EmitErrors += o.EmitErrors
	c.Pending += o.Pending
	c.Queue += o.Queue
	c.Capacity = max(c.Capacity, o.Capacity)
	if o.Latency != nil {
		c.addLatency(o.Latency.Counts, o.Latency.SumSeconds)
	}
}

// addLatency adds a histogram's counts per bucket and sum to c's.
func (c *ComponentStatus) addLatency(counts []uint64, sumSeconds float64) {
	if c.Latency == nil {
		c.Latency = &LatencyStatus{Counts: make([]uint64, len(counts))}
	}
	for b, n := range counts {
		if b < len(c.Latency.Counts) {
			c.Latency.Counts[b] += n
		}
	}
	c.Latency.SumSeconds += sumSeconds
}

// add adds o's counters to t's.
func (t *TransportStatus) add(o TransportStatus) {
	t.LostFrames += o.LostFrames
	t.FrameNACKs += o.FrameNACKs
	t.FramesResent += o.FramesResent
	t.DuplicateFrames += o.DuplicateFrames
	t.FencedRecords += o.FencedRecords
	t.Discarded += o.Discarded
	t.BadFrames += o.BadFrames
	t.PublishErrors += o.PublishErrors
	t.Backpressure += o.Backpressure
}

// taskStatus is task id as it is now; t is its inbox in this process, if
// it has one here.
func (r *run) taskStatus(id int, t *task) TaskStatus {
	info := &r.plan.tasks[id]
	ts := TaskStatus{Task: id, Component: info.name, Index: info.index}
	if t != nil {
		ts.Queue = len(t.data) + t.ctrl.len()
	}
	switch c := r.counters[id]; {
	case info.comp == nil:
	case info.comp.IsSpout():
		ts.Spout, ts.Pending, ts.Exhausted = true, r.pending[id].Load(), r.exhausted[id].Load()
	default:
		ts.Capacity = math.Float64frombits(c.capacity.Load())
	}
	return ts
}

// componentStatus adds up the figures of tasks (no ackers) per component,
// in the topology's order of components.
func (r *run) componentStatus(tasks []int) []ComponentStatus {
	var out []ComponentStatus
	at := map[string]int{}
	for _, id := range slices.Sorted(slices.Values(tasks)) {
		info, c := &r.plan.tasks[id], r.counters[id]
		if info.comp == nil || c == nil {
			continue
		}
		i, ok := at[info.name]
		if !ok {
			i = len(out)
			at[info.name] = i
			out = append(out, ComponentStatus{Component: info.name, Spout: info.comp.IsSpout()})
		}
		cs := &out[i]
		cs.Tasks++
		cs.Emitted += c.emitted.Load()
		cs.Acked += c.acked.Load()
		cs.Failed += c.failed.Load()
		cs.Panics += c.panics.Load()
		cs.EmitErrors += c.emitErrors.Load()
		if t := r.inboxes[id].Load(); t != nil {
			cs.Queue += int64(len(t.data) + t.ctrl.len())
		}
		h := c.execute
		if cs.Spout {
			cs.Replayed += c.replayed.Load()
			cs.TimedOut += c.timedOut.Load()
			cs.DeadLettered += c.deadLettered.Load()
			cs.Pending += r.pending[id].Load()
			h = c.complete
		} else {
			cs.Executed += c.executed.Load()
			cs.DuplicatesDropped += c.dupDropped.Load()
			cs.DedupSuspects += c.suspects.Load()
			cs.Capacity = max(cs.Capacity, math.Float64frombits(c.capacity.Load()))
		}
		if h != nil {
			counts, sum := h.Counts()
			cs.addLatency(counts, sum.Seconds())
		}
	}
	order := map[string]int{}
	for i, c := range r.plan.topo.Components {
		order[c.Name] = i
	}
	slices.SortStableFunc(out, func(a, b ComponentStatus) int { return order[a.Component] - order[b.Component] })
	return out
}

func (r *run) transportStatus() TransportStatus {
	tc := &r.tc
	return TransportStatus{LostFrames: tc.lostFrames.Load(), FrameNACKs: tc.nacks.Load(), FramesResent: tc.resent.Load(),
		DuplicateFrames: tc.dupFrames.Load(), FencedRecords: tc.fencedRecords.Load(), Discarded: tc.discarded(),
		BadFrames: tc.badFrames.Load(), PublishErrors: tc.publishErrors.Load(), Backpressure: tc.bpSignals.Load()}
}

// LatencyBounds are the upper bounds, in seconds, of the buckets of a
// LatencyStatus of a spout (complete latency) or a bolt (execute
// latency).
func LatencyBounds(spout bool) []float64 {
	if spout {
		return metrics.CompleteLatency.Buckets
	}
	return metrics.ExecuteLatency.Buckets
}

// The states of a local run, as LocalStatus says them.
const (
	LocalRunning  = "running"
	LocalFinished = "finished" // every source exhausted and every record processed
	LocalStopped  = "stopped"  // its context ended first (Ctrl-C)
	LocalFailed   = "failed"   // a task could not start or run: Err says why
)

// LocalView shows a local run's workers and tasks while it runs, and
// where they stood when it ended: the status page of ackflow run --ui
// reads it, next to the run's metrics. Give one to a run in Config.View;
// it serves one run at a time.
type LocalView struct {
	mu     sync.Mutex
	live   func() LocalStatus // while a run is on
	status LocalStatus        // the last run's, once it ended
	ran    bool
}

// NewLocalView returns a view that shows nothing until a run starts.
func NewLocalView() *LocalView { return &LocalView{} }

// Status returns the run's status now, or its last one if it ended; ok is
// false before a run started.
func (v *LocalView) Status() (st LocalStatus, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.live != nil {
		return v.live(), true
	}
	return v.status, v.ran
}

// LocalStatus is a local run at one instant.
type LocalStatus struct {
	Topology  string
	Guarantee Guarantee
	Started   time.Time
	// State is LocalRunning, then LocalFinished, LocalStopped or
	// LocalFailed, with Err and Ended.
	State string
	Err   string
	Ended time.Time
	// Crashes counts the workers that died (crash chaos) and were
	// replaced.
	Crashes int64
	Workers []LocalWorker
	Tasks   []LocalTask
	// Components are the run's figures per component, as its metrics
	// show them (latencies and capacity only with Config.Metrics).
	Components []ComponentStatus
}

// LocalWorker is one worker node of a local run.
type LocalWorker struct {
	Slot int // the node's index: worker-<Slot>
	// Incarnation counts the node's starts: a node that crash chaos
	// crashed starts again as the next incarnation.
	Incarnation uint64
	// Heartbeat is when it last reported its tasks to the leader (while it
	// is down, the last report before its crash).
	Heartbeat time.Time
	// Crashed says it died and has not started again yet.
	Crashed bool
	Tasks   int
}

// LocalTask is one task of a local run and where it runs.
type LocalTask struct {
	TaskStatus
	// Worker is the node that runs it, Epoch that node's incarnation.
	Worker int
	Epoch  uint64
}

// show shows what live returns while a run goes on; end freezes it with
// the run's outcome.
func (v *LocalView) show(live func() LocalStatus) (end func(state string, err error)) {
	if v == nil {
		return func(string, error) {}
	}
	v.mu.Lock()
	v.live, v.ran = live, true
	v.mu.Unlock()
	return func(state string, err error) {
		st := live()
		st.State, st.Ended = state, time.Now()
		if err != nil {
			st.Err = err.Error()
		}
		v.mu.Lock()
		v.live, v.status = nil, st
		v.mu.Unlock()
	}
}
