package workers

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// run is the state shared by the tasks of one member of a generation
// (member.go), or by its leader's checkpoints (leader.go).
type run struct {
	cfg  Config
	plan *plan
	url  string
	log  zerolog.Logger
	// warn is log sampled: a burst, then a line per period, for errors that
	// can repeat per record or per frame.
	warn zerolog.Logger
	loss lossConfig
	// deadLetters takes the roots given up on (in memory when the Config
	// named none).
	deadLetters deadletter.Sink
	// componentTasks is TaskContext.ComponentTasks, shared read-only.
	componentTasks map[string][]int

	// Checkpoints: the store, and the checkpoint new tasks restore from
	// (nil: the beginning).
	store       checkpoint.Store
	ckptSubject string
	restoreMu   sync.Mutex
	restore     *checkpoint.Restore
	counters    []*taskCounters // per task; nil for ackers
	tc          transportCounters
	chaosCnt    chaos.Counters
	recov       recoveryLog

	subjects   []string // per task
	ctlSubject string

	exhausted []atomic.Bool  // per task: spout source done
	pending   []atomic.Int64 // per task: spout trees in flight or queued for replay
	held      []atomic.Int64 // per task: frames held back by chaos
	logLen    []atomic.Int64 // per task: output log entries
	logFull   []atomic.Bool  // per task: output log at its bound
	// inboxes are the tasks of this process's current workers, for the
	// queue depths metrics show (nil where the task runs elsewhere).
	inboxes []atomic.Pointer[task]

	// gen is the generation this member runs, the high bits of the
	// fencing epoch every frame carries (member.go, FrameEpoch); leaseErr,
	// if set, says whether this process may still act for it (its
	// membership has not expired), checked before anything that leaves a
	// trace outside the run.
	gen      uint64
	leaseErr func() error

	abortOnce sync.Once
	abortErr  error
	aborted   chan struct{}
}

// natsOptions are own followed by the configured NATSOptions (credentials
// and TLS come last, so that they win).
func (r *run) natsOptions(own ...nats.Option) []nats.Option {
	return append(own, r.cfg.NATSOptions...)
}

// fenced returns why this process must not commit anything for the run
// (cluster mode: its lease expired, so another generation may own its
// tasks), or nil.
func (r *run) fenced() error {
	if r.leaseErr == nil {
		return nil
	}
	return r.leaseErr()
}

// isAborted reports whether the run was aborted.
func (r *run) isAborted() bool {
	select {
	case <-r.aborted:
		return true
	default:
		return false
	}
}

// abort ends the run with err (a spout or bolt that cannot start or run).
func (r *run) abort(err error) {
	r.abortOnce.Do(func() {
		r.abortErr = err
		close(r.aborted)
	})
}

// newRun makes the state a run's workers share in one process.
func newRun(topo *topology.Topology, p *plan, cfg Config) *run {
	r := &run{
		cfg: cfg, plan: p, url: cfg.NATSURL, log: cfg.Logger,
		warn:           cfg.Logger.Sample(&zerolog.BurstSampler{Burst: 10, Period: 10 * time.Second}),
		loss:           lossConfig{grace: cfg.LossGrace, renack: max(4*cfg.LossGrace, 20*time.Millisecond), maxNacks: 10},
		deadLetters:    cfg.DeadLetters,
		componentTasks: map[string][]int{},
		counters:       make([]*taskCounters, len(p.tasks)),
		ctlSubject:     "ackflow." + topo.Name + ".ctl",
		ckptSubject:    "ackflow." + topo.Name + ".ckpt",
		exhausted:      make([]atomic.Bool, len(p.tasks)),
		pending:        make([]atomic.Int64, len(p.tasks)),
		held:           make([]atomic.Int64, len(p.tasks)),
		logLen:         make([]atomic.Int64, len(p.tasks)),
		logFull:        make([]atomic.Bool, len(p.tasks)),
		inboxes:        make([]atomic.Pointer[task], len(p.tasks)),
		aborted:        make(chan struct{}),
	}
	for _, c := range topo.Components {
		r.componentTasks[c.Name] = append([]int(nil), p.compTasks[c.Name]...)
	}
	for i, t := range p.tasks {
		if t.comp == nil {
			continue
		}
		tc := &taskCounters{}
		if t.comp.IsSpout() {
			tc.latency = &histogram{}
		}
		r.counters[i] = tc
	}
	if cfg.Metrics != nil {
		r.timeTasks()
	}
	if r.deadLetters == nil && !cfg.DeadLetterStream {
		r.deadLetters = deadletter.NewMemory()
	}
	for i := range p.tasks {
		r.subjects = append(r.subjects, p.subject(i))
	}
	return r
}

// componentFigures adds up the figures of c's tasks, with the histogram
// of complete latency its percentiles come from.
func (r *run) componentFigures(c *topology.Component) (ComponentSummary, *histogram) {
	tasks := r.plan.compTasks[c.Name]
	cs := ComponentSummary{Name: c.Name, Tasks: len(tasks), Spout: c.IsSpout()}
	lat := &histogram{}
	var fill, fp float64
	for _, id := range tasks {
		tc := r.counters[id]
		cs.Emitted += tc.emitted.Load()
		cs.Executed += tc.executed.Load()
		cs.Acked += tc.acked.Load()
		cs.Failed += tc.failed.Load()
		cs.Replayed += tc.replayed.Load()
		cs.TimedOut += tc.timedOut.Load()
		cs.WindowPeak = max(cs.WindowPeak, tc.windowPeak.Load())
		cs.Panics += tc.panics.Load()
		cs.DuplicatesDropped += tc.dupDropped.Load()
		cs.Suspects += tc.suspects.Load()
		cs.ReEmitted += tc.reemitted.Load()
		cs.LogPeakEntries = max(cs.LogPeakEntries, tc.logPeak.Load())
		cs.LogPeakBytes = max(cs.LogPeakBytes, tc.logBytes.Load())
		cs.LogExpired += tc.expired.Load()
		fill = max(fill, math.Float64frombits(tc.fillBits.Load()))
		fp = max(fp, math.Float64frombits(tc.fpBits.Load()))
		cs.ReExecuted += tc.reexecuted.Load()
		cs.Parked += tc.parked.Load()
		cs.DeadLettered += tc.deadLettered.Load()
		cs.EmitErrors += tc.emitErrors.Load()
		if tc.latency != nil {
			lat.add(tc.latency)
		}
	}
	cs.BloomFill, cs.BloomFPRate = fill, fp
	cs.LatencyP50, cs.LatencyP99, cs.LatencyP999 = lat.quantile(0.5), lat.quantile(0.99), lat.quantile(0.999)
	return cs, lat
}

// Subject returns the NATS subject of a task: ackflow.<topology>.task.<id>,
// or ackflow.<topology>.ack.<n> for the n-th acker.
func (p *plan) subject(task int) string {
	t := p.tasks[task]
	if t.comp == nil {
		return fmt.Sprintf("ackflow.%s.ack.%d", p.topo.Name, t.index)
	}
	return fmt.Sprintf("ackflow.%s.task.%d", p.topo.Name, task)
}

func (r *run) pendingTrees() int64 { return sum(r.pending) }
func (r *run) logEntries() int64   { return sum(r.logLen) }

// sum adds up a per-task gauge.
func sum(gauges []atomic.Int64) int64 {
	var n int64
	for i := range gauges {
		n += gauges[i].Load()
	}
	return n
}

func (r *run) inFlight() int64 {
	return r.tc.sentRecords.Load() - r.tc.doneRecords.Load() - r.tc.discardedRecords.Load()
}

// timeTasks gives every spout a histogram of complete latency and every
// bolt one of execute latency, which also makes the bolts measure their
// capacity: what metrics and cluster status reports show. Without it the
// runtime does not time executes.
func (r *run) timeTasks() {
	for i, tc := range r.counters {
		switch {
		case tc == nil:
		case r.plan.tasks[i].comp.IsSpout():
			tc.complete = metrics.NewLatencyHistogram(metrics.CompleteLatency)
		default:
			tc.execute = metrics.NewLatencyHistogram(metrics.ExecuteLatency)
		}
	}
}

// replays returns the source records replayed and dead-lettered so far.
func (r *run) replays() (replayed, deadLettered int64) {
	for _, c := range r.counters {
		if c != nil {
			replayed += c.replayed.Load()
			deadLettered += c.deadLettered.Load()
		}
	}
	return replayed, deadLettered
}

func (r *run) records() int64 {
	var n int64
	for _, c := range r.counters {
		if c != nil {
			n += c.emitted.Load()
		}
	}
	return n
}

// partial is the run's figures for an in-process cluster's summary
// (figures), taken once its tasks have stopped.
func (r *run) partial() partial {
	p := partial{gen: r.gen, lat: map[string]*histogram{}, rec: r.recov.byCrash(), plan: r.plan, comps: r.componentStatus(r.allTasks()), inFlight: r.inFlight()}
	p.sum = r.counts(p.lat)
	for i := range p.comps {
		p.comps[i].Pending, p.comps[i].Queue, p.comps[i].Capacity = 0, 0, 0
	}
	return p
}

// counts is the run's part of a summary (no dead letters, duration,
// crashes or recoveries: figures adds those up); lat, if set, gets the
// histogram of complete latency of every spout.
func (r *run) counts(lat map[string]*histogram) *Summary {
	s := &Summary{
		Topology: r.plan.topo.Name, Guarantee: r.cfg.Guarantee, Workers: r.plan.workers,
		Placement:       r.plan.describe(),
		NATSMessagesOut: r.tc.natsMsgsOut.Load(), NATSBytesOut: r.tc.natsBytesOut.Load(),
		NATSMessagesIn: r.tc.natsMsgsIn.Load(), NATSBytesIn: r.tc.natsBytesIn.Load(),
		NATSRecordsOut: r.tc.natsRecordsOut.Load(), LocalRecords: r.tc.localRecords.Load(),
		AckMessages: r.tc.ackMsgs.Load(), AckRides: r.tc.ackRides.Load(), BadFrames: r.tc.badFrames.Load(),
		FencedRecords: r.tc.fencedRecords.Load(), FencedFrames: r.tc.fencedFrames.Load(), DuplicateFrames: r.tc.dupFrames.Load(), BackpressureSignals: r.tc.bpSignals.Load(),
		SlowConsumers: r.tc.slowConsumers.Load(), Reconnects: r.tc.reconnects.Load(),
		PublishErrors: r.tc.publishErrors.Load(), Unaccounted: max(0, r.inFlight()),
		Discarded: r.tc.discarded(),
		NACKs:     r.tc.nacks.Load(), Resent: r.tc.resent.Load(), ResendMisses: r.tc.resendMisses.Load(), LostFrames: r.tc.lostFrames.Load(),
		DeadLetterErrors: r.tc.deadLetterErrors.Load(),
		LogEntries:       r.logEntries(),
		Chaos: ChaosSummary{
			FramesDropped: r.chaosCnt.FramesDropped.Load(), RecordsDropped: r.chaosCnt.RecordsDropped.Load(),
			FramesDuplicated: r.chaosCnt.FramesDuplicated.Load(), RecordsDuplicated: r.chaosCnt.RecordsDuplicated.Load(),
			FramesDelayed: r.chaosCnt.FramesDelayed.Load(), FramesReordered: r.chaosCnt.FramesReordered.Load(),
			InputsFailed: r.chaosCnt.InputsFailed.Load(),
		},
	}
	for _, tc := range r.counters {
		if tc == nil {
			continue
		}
		s.noteTimes(tc.firstRoot.Load(), tc.lastTree.Load())
	}
	for _, c := range r.plan.topo.Components {
		cs, h := r.componentFigures(c)
		if lat != nil && cs.Spout {
			lat[c.Name] = h
		}
		s.DeadLettered += cs.DeadLettered
		if cs.Spout {
			s.SourceRecords += cs.Emitted
		}
		s.Records += cs.Emitted + cs.Replayed
		s.Components = append(s.Components, cs)
	}
	return s
}
