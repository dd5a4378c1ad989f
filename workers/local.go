package workers

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// run is the state shared by the workers of one local run.
type run struct {
	cfg      Config
	plan     *plan
	url      string
	log      zerolog.Logger
	comps    map[string]*componentCounters
	tc       transportCounters
	chaosCnt chaos.Counters
	recov    recoveryLog

	subjects   []string // per task
	ctlSubject string
	hbSubject  string

	exhausted []atomic.Bool  // per task: spout source done
	pending   []atomic.Int64 // per task: spout trees in flight or queued for replay
	held      []atomic.Int64 // per task: frames held back by chaos
	logLen    []atomic.Int64 // per task: output log entries
	logFull   []atomic.Bool  // per task: output log at its bound

	abortOnce sync.Once
	abortErr  error
	aborted   chan struct{}
}

// abort ends the run with err (a spout or bolt that cannot start or run).
func (r *run) abort(err error) {
	r.abortOnce.Do(func() {
		r.abortErr = err
		close(r.aborted)
	})
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

// RunLocal runs topo in this process until every spout is exhausted and
// everything in flight is processed, or ctx is cancelled. Unless
// cfg.NATSURL is set, it starts an embedded NATS server for the run.
func RunLocal(ctx context.Context, topo *topology.Topology, cfg Config) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Chaos.CrashEvery > 0 && len(p.crashable) == 0 {
		return nil, fmt.Errorf("workers: crash chaos needs a worker without spouts or stateful bolts; placement is %s", p.describe())
	}
	r := &run{
		cfg: cfg, plan: p, url: cfg.NATSURL, log: cfg.Logger,
		comps:      map[string]*componentCounters{},
		ctlSubject: "ackflow." + topo.Name + ".ctl",
		hbSubject:  "ackflow." + topo.Name + ".hb",
		exhausted:  make([]atomic.Bool, len(p.tasks)),
		pending:    make([]atomic.Int64, len(p.tasks)),
		held:       make([]atomic.Int64, len(p.tasks)),
		logLen:     make([]atomic.Int64, len(p.tasks)),
		logFull:    make([]atomic.Bool, len(p.tasks)),
		aborted:    make(chan struct{}),
	}
	for _, c := range topo.Components {
		r.comps[c.Name] = &componentCounters{}
	}
	for i := range p.tasks {
		r.subjects = append(r.subjects, p.subject(i))
	}
	if r.url == "" {
		srv, err := embednats.Start(embednats.Config{NoJetStream: true})
		if err != nil {
			return nil, err
		}
		defer srv.Shutdown()
		r.url = srv.URL()
	}
	r.log.Info().Str("topology", topo.Name).Str("guarantee", cfg.Guarantee.String()).Str("placement", p.describe()).Msg("starting local run")
	return r.execute(ctx)
}

func (r *run) execute(ctx context.Context) (*Summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sup, err := newSupervisor(ctx, r)
	if err != nil {
		return nil, err
	}
	defer sup.close()
	start := time.Now()
	for s := 0; s < r.plan.workers; s++ {
		if err := sup.startSlot(s, false); err != nil {
			sup.shutdownAll()
			return nil, err
		}
	}
	sup.beginAll()
	sup.watch()
	err = r.waitDone(ctx, start)
	elapsed := time.Since(start)
	sup.stopWatching()
	sup.shutdownAll()
	if err == nil {
		select {
		case <-r.aborted:
			err = r.abortErr
		default:
		}
	}
	sum := r.summary(elapsed, sup.crashes.Load())
	for _, at := range sup.crashTimes() {
		sum.CrashTimes = append(sum.CrashTimes, at.Sub(start))
	}
	return sum, err
}

// waitDone returns when every spout is exhausted, no tree is pending, and
// every record sent has been processed or is known lost. Records that
// vanished without a trace (in a crashed worker, or dropped by NATS) are
// waited for only until nothing has moved for quiet.
func (r *run) waitDone(ctx context.Context, start time.Time) error {
	const quiet = 1500 * time.Millisecond
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var lastDone int64 = -1
	lastMove := time.Now()
	stable := 0
	var lastProgress time.Time
	var lastRecords int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.aborted:
			return r.abortErr
		case now := <-t.C:
			if r.cfg.Progress != nil && now.Sub(lastProgress) >= r.cfg.ProgressEvery {
				recs := r.records()
				rate := 0.0
				if !lastProgress.IsZero() {
					rate = float64(recs-lastRecords) / now.Sub(lastProgress).Seconds()
				}
				r.cfg.Progress(Progress{Elapsed: now.Sub(start), Records: recs, RecordsPerSec: rate, Pending: r.pendingTrees(), InFlight: r.inFlight()})
				lastProgress, lastRecords = now, recs
			}
			done := r.tc.doneRecords.Load()
			if done != lastDone {
				lastDone, lastMove = done, now
			}
			if !r.allExhausted() || r.pendingTrees() > 0 || r.heldFrames() > 0 {
				stable = 0
				continue
			}
			if r.inFlight() == 0 {
				if stable++; stable >= 3 {
					return nil
				}
				continue
			}
			stable = 0
			if now.Sub(lastMove) >= quiet {
				return nil
			}
		}
	}
}

func (r *run) allExhausted() bool {
	for i, t := range r.plan.tasks {
		if t.comp != nil && t.comp.IsSpout() && !r.exhausted[i].Load() {
			return false
		}
	}
	return true
}

func (r *run) pendingTrees() int64 { return sum(r.pending) }
func (r *run) heldFrames() int64   { return sum(r.held) }
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

func (r *run) records() int64 {
	var n int64
	for _, c := range r.comps {
		n += c.emitted.Load()
	}
	return n
}

func (r *run) summary(elapsed time.Duration, crashes int64) *Summary {
	s := &Summary{
		Topology: r.plan.topo.Name, Guarantee: r.cfg.Guarantee, Workers: r.plan.workers,
		Placement: r.plan.describe(), Duration: elapsed,
		NATSMessagesOut: r.tc.natsMsgsOut.Load(), NATSBytesOut: r.tc.natsBytesOut.Load(),
		NATSMessagesIn: r.tc.natsMsgsIn.Load(), NATSBytesIn: r.tc.natsBytesIn.Load(),
		NATSRecordsOut: r.tc.natsRecordsOut.Load(), LocalRecords: r.tc.localRecords.Load(),
		AckMessages: r.tc.ackMsgs.Load(), BadFrames: r.tc.badFrames.Load(),
		FencedRecords: r.tc.fencedRecords.Load(), CtrlDropped: r.tc.ctrlDropped.Load(), DuplicateFrames: r.tc.dupFrames.Load(), BackpressureSignals: r.tc.bpSignals.Load(),
		PublishErrors: r.tc.publishErrors.Load(), Unaccounted: max(0, r.inFlight()),
		Crashes: int(crashes), Recoveries: r.recov.list(), LogEntries: r.logEntries(),
		Chaos: ChaosSummary{
			FramesDropped: r.chaosCnt.FramesDropped.Load(), RecordsDropped: r.chaosCnt.RecordsDropped.Load(),
			FramesDuplicated: r.chaosCnt.FramesDuplicated.Load(), RecordsDuplicated: r.chaosCnt.RecordsDuplicated.Load(),
			FramesDelayed: r.chaosCnt.FramesDelayed.Load(), FramesReordered: r.chaosCnt.FramesReordered.Load(),
		},
	}
	for _, c := range r.plan.topo.Components {
		cc := r.comps[c.Name]
		cs := ComponentSummary{
			Name: c.Name, Tasks: len(r.plan.compTasks[c.Name]), Spout: c.IsSpout(),
			Emitted: cc.emitted.Load(), Executed: cc.executed.Load(), Acked: cc.acked.Load(),
			Failed: cc.failed.Load(), Replayed: cc.replayed.Load(), TimedOut: cc.timedOut.Load(), Panics: cc.panics.Load(),
			DuplicatesDropped: cc.dupDropped.Load(), Suspects: cc.suspects.Load(), ReEmitted: cc.reemitted.Load(),
			LogPeakEntries: cc.logPeak.Load(), LogPeakBytes: cc.logBytes.Load(), LogExpired: cc.expired.Load(), BloomFill: math.Float64frombits(cc.fillBits.Load()), BloomFPRate: math.Float64frombits(cc.fpBits.Load()),
			LatencyP50: cc.latency.quantile(0.5), LatencyP99: cc.latency.quantile(0.99), LatencyP999: cc.latency.quantile(0.999),
		}
		if cs.Spout {
			s.SourceRecords += cs.Emitted
		}
		s.Records += cs.Emitted + cs.Replayed
		s.Components = append(s.Components, cs)
	}
	if elapsed > 0 {
		s.RecordsPerSec = float64(s.Records) / elapsed.Seconds()
	}
	return s
}

// supervisor starts the worker slots, detects dead workers from missing
// heartbeats, restarts them and tells the others (local mode's stand-in for
// the cluster's KV-based membership).
type supervisor struct {
	ctx  context.Context
	r    *run
	nc   *nats.Conn
	mu   sync.Mutex
	live []*Worker
	inc  []uint64
	seen []atomic.Int64 // per slot: unix nanos of the last heartbeat

	crashes   atomic.Int64
	crashLog  []time.Time    // guarded by mu
	warned    []bool         // per slot, owned by detect
	crashedAt []atomic.Int64 // per slot: when chaos crashed it (unix nanos)
	crashID   []atomic.Int64 // per slot: ID of that crash
	stopCh    chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	graveyard sync.WaitGroup // crashed workers' goroutines
}

func newSupervisor(ctx context.Context, r *run) (*supervisor, error) {
	nc, err := nats.Connect(r.url, nats.Name("ackflow "+r.plan.topo.Name+" supervisor"))
	if err != nil {
		return nil, fmt.Errorf("workers: supervisor cannot connect to NATS at %s: %w", r.url, err)
	}
	n := r.plan.workers
	s := &supervisor{ctx: ctx, r: r, nc: nc, live: make([]*Worker, n), inc: make([]uint64, n),
		seen: make([]atomic.Int64, n), crashedAt: make([]atomic.Int64, n), crashID: make([]atomic.Int64, n), warned: make([]bool, n), stopCh: make(chan struct{})}
	if _, err := nc.Subscribe(r.hbSubject, s.onHeartbeat); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nc.Flush()
}

func (s *supervisor) onHeartbeat(m *nats.Msg) {
	f := strings.Fields(string(m.Data))
	if len(f) != 2 {
		return
	}
	slot, err := strconv.Atoi(f[0])
	inc, err2 := strconv.ParseUint(f[1], 10, 64)
	if err != nil || err2 != nil || slot < 0 || slot >= len(s.seen) {
		return
	}
	s.mu.Lock()
	current := s.inc[slot] == inc
	s.mu.Unlock()
	if current {
		s.seen[slot].Store(time.Now().UnixNano())
	}
}

// startSlot starts a new incarnation of slot; begin also starts its tasks.
func (s *supervisor) startSlot(slot int, begin bool) error {
	s.mu.Lock()
	s.inc[slot]++
	epochs := append([]uint64(nil), s.inc...)
	s.mu.Unlock()
	w, err := startWorker(s.ctx, s.r, slot, epochs[slot], epochs)
	if err != nil {
		return err
	}
	s.seen[slot].Store(time.Now().UnixNano())
	s.mu.Lock()
	s.live[slot] = w
	s.mu.Unlock()
	if begin {
		w.begin()
	}
	return nil
}

func (s *supervisor) beginAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.live {
		w.begin()
	}
}

// watch starts failure detection and the crasher when crash chaos is on.
// Without it, the workers of a local run share one process and cannot die
// on their own, so there is nothing to detect, and a false alarm under load
// would only destroy state.
func (s *supervisor) watch() {
	if every := s.r.cfg.Chaos.CrashEvery; every > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.detect()
		}()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.crasher(every)
		}()
	}
}

func (s *supervisor) detect() {
	t := time.NewTicker(s.r.cfg.HeartbeatEvery / 2)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			for slot := range s.seen {
				if now.Sub(time.Unix(0, s.seen[slot].Load())) < s.r.cfg.DeadAfter {
					continue
				}
				if !s.gone(slot) {
					// In one process a silent worker is only starved of CPU
					// (a loaded machine, the race detector): replacing it
					// would throw away live state, spouts and stateful bolts
					// included. Say so once per silence and keep waiting.
					if !s.warned[slot] {
						s.warned[slot] = true
						s.r.log.Warn().Int("worker", slot).Dur("silent", now.Sub(time.Unix(0, s.seen[slot].Load()))).Msg("worker missed its heartbeats but is alive; not replacing it")
					}
					continue
				}
				s.warned[slot] = false
				s.replace(slot, now)
			}
		}
	}
}

// gone reports whether slot's worker really died (its connection is closed),
// as opposed to being slow to heartbeat.
func (s *supervisor) gone(slot int) bool {
	s.mu.Lock()
	w := s.live[slot]
	s.mu.Unlock()
	return w == nil || w.crashed.Load()
}

// replace declares slot dead, starts a new incarnation and broadcasts it.
func (s *supervisor) replace(slot int, now time.Time) {
	s.mu.Lock()
	old := s.live[slot]
	s.live[slot] = nil
	s.mu.Unlock()
	if old != nil {
		// A worker that stopped heartbeating may still be running (a
		// pause): cut it off so it cannot act after being replaced.
		old.crash()
		s.graveyard.Add(1)
		go func() {
			defer s.graveyard.Done()
			old.wg.Wait()
		}()
	}
	died := s.crashedAt[slot].Swap(0)
	if died == 0 {
		died = s.seen[slot].Load()
	}
	if err := s.startSlot(slot, true); err != nil {
		s.r.log.Error().Err(err).Int("worker", slot).Msg("cannot restart worker; will retry")
		return
	}
	s.mu.Lock()
	inc := s.inc[slot]
	s.mu.Unlock()
	crashID := s.crashID[slot].Swap(0)
	if crashID == 0 {
		crashID = s.crashes.Add(1) // stopped heartbeating on its own
	}
	s.r.log.Warn().Int("worker", slot).Uint64("incarnation", inc).Dur("detected_after", now.Sub(time.Unix(0, died))).Msg("worker declared dead and restarted")
	msg := fmt.Sprintf("dead %d %d %d %d", slot, inc, crashID, died)
	s.nc.Publish(s.r.ctlSubject, []byte(msg))
	s.nc.Flush()
}

// crasher kills a stateless worker every period, cycling through them in
// an order drawn from the chaos seed.
func (s *supervisor) crasher(every time.Duration) {
	rng := rand.New(rand.NewPCG(s.r.cfg.Chaos.Seed, 0xc4a5))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			slot := s.r.plan.crashable[rng.IntN(len(s.r.plan.crashable))]
			s.mu.Lock()
			w := s.live[slot]
			s.mu.Unlock()
			if w == nil || w.crashed.Load() {
				continue
			}
			id := s.crashes.Add(1)
			now := time.Now()
			s.crashID[slot].Store(id)
			s.crashedAt[slot].Store(now.UnixNano())
			s.mu.Lock()
			s.crashLog = append(s.crashLog, now)
			s.mu.Unlock()
			s.r.log.Warn().Int("worker", slot).Msg("chaos: crashing worker")
			w.crash()
		}
	}
}

func (s *supervisor) stopWatching() {
	s.stopOnce.Do(func() { close(s.stopCh) })
	s.wg.Wait()
}

func (s *supervisor) shutdownAll() {
	s.stopWatching()
	s.mu.Lock()
	live := append([]*Worker(nil), s.live...)
	s.mu.Unlock()
	for _, w := range live {
		if w != nil {
			w.cancel()
		}
	}
	for _, w := range live {
		if w != nil {
			w.shutdown()
		}
	}
	s.graveyard.Wait()
}

func (s *supervisor) close() { s.nc.Close() }

func (s *supervisor) crashTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.crashLog...)
}
