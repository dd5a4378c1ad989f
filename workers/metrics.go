package workers

import (
	"math"
	"strconv"
	"time"

	"github.com/ackflow/ackflow/metrics"
)

// Metrics (Config.Metrics): a run shows itself to Prometheus through a
// metrics.Source that reads, at scrape time, the atomics its tasks update
// anyway (taskCounters, transportCounters and the per-task gauges of run).
// Nothing on the hot path looks up a label or a map; with a registry the
// bolts also time each frame they process and the spouts fill a
// Prometheus histogram next to the summary's.
//
// A local run shows everything. In cluster mode a Member shows the tasks
// it runs and its workers' transport counters, the Leader the
// generation's checkpoints, and the runner the topology's latest
// failover; each is removed from the registry when it ends, which keeps
// its counters (metrics.Registry.Add).

// runMetrics is one run's metrics.Source.
type runMetrics struct {
	r      *run
	tasks  []taskSeries
	coord  *coordinator // nil unless this process takes the run's checkpoints
	worker bool         // the run's workers live here: transport counters
}

// taskSeries is a task shown by a runMetrics, with its label values.
type taskSeries struct {
	id     int
	labels []string // topology, component, index
	spout  bool
	dedup  bool // a stateful bolt with an output log and a dedup filter
}

// showMetrics adds the run to Config.Metrics: the given tasks, its
// checkpoints if coord is set, and its workers' transport counters if
// worker. It returns what removes it (nothing to do without a registry).
func (r *run) showMetrics(tasks []int, coord *coordinator, worker bool) (remove func()) {
	if r.cfg.Metrics == nil {
		return func() {}
	}
	m := &runMetrics{r: r, coord: coord, worker: worker}
	for _, id := range tasks {
		t := &r.plan.tasks[id]
		if t.comp == nil {
			continue // ackers: their figures are in the spouts' and bolts'
		}
		m.tasks = append(m.tasks, taskSeries{id: id, labels: []string{r.plan.topo.Name, t.name, strconv.Itoa(t.index)},
			spout: t.comp.IsSpout(), dedup: r.plan.logs(id)})
	}
	return r.cfg.Metrics.Add(m)
}

// hostedTasks are the tasks of slot in the run's plan.
func (r *run) hostedTasks(slot int) []int {
	var ids []int
	for i := range r.plan.tasks {
		if r.plan.assign[i] == slot {
			ids = append(ids, i)
		}
	}
	return ids
}

// allTasks are the IDs of every task of the run's plan.
func (r *run) allTasks() []int {
	ids := make([]int, len(r.plan.tasks))
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// WriteMetrics implements metrics.Source.
func (m *runMetrics) WriteMetrics(w *metrics.Writer) {
	for _, t := range m.tasks {
		m.writeTask(w, t)
	}
	topo := m.r.plan.topo.Name
	if m.worker {
		m.writeWorker(w, topo)
	}
	if m.coord != nil {
		m.coord.writeMetrics(w, topo)
	}
}

func (m *runMetrics) writeTask(w *metrics.Writer, t taskSeries) {
	r, c, l := m.r, m.r.counters[t.id], t.labels
	put := func(f *metrics.Family, v int64) { w.Add(f, float64(v), l...) }
	put(metrics.Emitted, c.emitted.Load())
	put(metrics.Transferred, c.transferred.Load())
	put(metrics.Acked, c.acked.Load())
	put(metrics.Failed, c.failed.Load())
	put(metrics.Panics, c.panics.Load())
	put(metrics.EmitErrors, c.emitErrors.Load())
	queue := 0
	if tk := r.inboxes[t.id].Load(); tk != nil {
		queue = len(tk.data) + tk.ctrl.len()
	}
	put(metrics.InboundQueue, int64(queue))
	if t.spout {
		put(metrics.Replayed, c.replayed.Load())
		put(metrics.TimedOut, c.timedOut.Load())
		put(metrics.DeadLettered, c.deadLettered.Load())
		put(metrics.PendingTrees, r.pending[t.id].Load())
		put(metrics.PendingWindow, c.window.Load())
		if c.complete != nil {
			w.AddHistogram(c.complete, l...)
		}
		return
	}
	put(metrics.Executed, c.executed.Load())
	if c.execute != nil {
		w.AddHistogram(c.execute, l...)
	}
	w.Add(metrics.Capacity, math.Float64frombits(c.capacity.Load()), l...)
	if t.dedup {
		put(metrics.DuplicatesDropped, c.dupDropped.Load())
		put(metrics.DedupSuspects, c.suspects.Load())
		put(metrics.DedupReEmitted, c.reemitted.Load())
		put(metrics.OutputLogEntries, r.logLen[t.id].Load())
		put(metrics.OutputLogBytes, c.logSize.Load())
		w.Add(metrics.BloomFill, math.Float64frombits(c.bloomFill.Load()), l...)
		w.Add(metrics.BloomFPRate, math.Float64frombits(c.bloomFP.Load()), l...)
	}
}

func (m *runMetrics) writeWorker(w *metrics.Writer, topo string) {
	tc := &m.r.tc
	put := func(f *metrics.Family, v int64) { w.Add(f, float64(v), topo) }
	put(metrics.FencedFrames, tc.fencedFrames.Load())
	put(metrics.FencedRecords, tc.fencedRecords.Load())
	put(metrics.DiscardedRecs, tc.discarded())
	put(metrics.BadFrames, tc.badFrames.Load())
	put(metrics.DuplicateFrames, tc.dupFrames.Load())
	put(metrics.FrameNACKs, tc.nacks.Load())
	put(metrics.FramesResent, tc.resent.Load())
	put(metrics.FramesLost, tc.lostFrames.Load())
	put(metrics.PublishErrors, tc.publishErrors.Load())
	put(metrics.Backpressure, tc.bpSignals.Load())
	put(metrics.NATSMsgsOut, tc.natsMsgsOut.Load())
	put(metrics.NATSBytesOut, tc.natsBytesOut.Load())
	put(metrics.NATSMsgsIn, tc.natsMsgsIn.Load())
	put(metrics.NATSBytesIn, tc.natsBytesIn.Load())
	put(metrics.NATSReconnects, tc.reconnects.Load())
	put(metrics.SlowConsumers, tc.slowConsumers.Load())
	// The recovery gauge is the leader's (runner.go): a member's spouts
	// time the same failover from their side (Summary.Recoveries), and
	// two figures of one failover in one process would add up.
}

// writeMetrics writes the checkpoint families.
func (c *coordinator) writeMetrics(w *metrics.Writer, topo string) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	w.Add(metrics.CheckpointsCompleted, float64(c.taken), topo)
	w.Add(metrics.CheckpointsFailed, float64(c.aborted), topo)
	w.Add(metrics.CheckpointPauseTotal, c.paused.Seconds(), topo)
	if c.done.IsZero() {
		return // no complete checkpoint yet: no age, rather than a made-up one
	}
	w.Add(metrics.CheckpointDuration, c.duration.Seconds(), topo)
	w.Add(metrics.CheckpointSize, float64(c.bytes), topo)
	w.Add(metrics.CheckpointPause, c.pause.Seconds(), topo)
	w.Add(metrics.CheckpointAge, time.Since(c.done).Seconds(), topo)
	w.Add(metrics.CheckpointEpoch, float64(c.committed.Load()), topo)
}
