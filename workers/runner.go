package workers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// runner is one worker's part of one submitted topology: the member of
// its current generation, if the worker has tasks in it, and the leader
// when the worker wins the topology's election.
type runner struct {
	n     *Node
	name  string
	build func(map[string]string) (*topology.Topology, error)
	log   zerolog.Logger
	// level is the topology's log level on this worker: the worker's own
	// (base) unless the submission sets one (ackflow loglevel).
	level *LevelVar
	base  zerolog.Level

	mu      sync.Mutex
	spec    cluster.Spec
	specRev uint64
	deleted bool
	changed chan struct{} // a new spec: the runner and its leader look again
	lead    chan struct{}

	leader *Leader // while this worker leads the current generation

	// Owned by run's goroutine: this worker's slots of generation gen
	// (usually one; more when slots of dead workers moved here), and
	// where a member that failed says so.
	members map[int]*Member
	gen     uint64
	failed  chan *Member
	// waiting is the newest generation, if it came before its submission
	// reached this worker (onGeneration).
	waiting *cluster.Generation
	lastErr string
	// failedGen is the generation this worker's tasks failed in (0:
	// none): its report says so, and the leader starts the next one.
	failedGen uint64
	// superseded: they failed because the checkpoint the generation
	// restores is gone (Report.Superseded).
	superseded bool
	store      checkpoint.Store
	built      map[uint64]*topology.Topology // by spec revision
	// The last report put, and the counts of the last look, for
	// NodeConfig.quietEvery.
	lastKey                      quietKey
	lastPut                      time.Time
	lastRecords, lastUnprocessed int64

	cancel context.CancelFunc
	done   chan struct{}

	// recovery is the latest failover this worker led, in nanoseconds
	// (0: none), for the metrics.
	recovery atomic.Int64
	// invalid counts invalid generation entries this worker, leading,
	// wrote over; moves the dead workers whose slots it moved.
	invalid atomic.Int64
	moves   atomic.Int64
	// newest is the number of the newest generation the watch has seen,
	// delivered to run's loop or not yet.
	newest atomic.Uint64
}

func newRunner(n *Node, name string, build func(map[string]string) (*topology.Topology, error)) *runner {
	base := n.log.GetLevel()
	level := NewLevelVar(base)
	log := n.log
	if n.cfg.named != name {
		log = log.With().Str("topology", name).Logger()
	}
	return &runner{n: n, name: name, build: build, log: level.Leveled(log), level: level, base: base,
		changed: make(chan struct{}, 1), lead: make(chan struct{}, 1), built: map[uint64]*topology.Topology{}, done: make(chan struct{}),
		members: map[int]*Member{}, failed: make(chan *Member, 1)}
}

// setLevel applies the submission's log level, or the worker's own.
func (r *runner) setLevel(spec cluster.Spec) {
	level := r.base
	if spec.LogLevel != "" {
		l, err := ParseLevel(spec.LogLevel)
		if err != nil {
			r.log.Warn().Err(err).Msg("the submission's log level is not one this worker knows; keeping its own")
		} else {
			level = l
		}
	}
	if old := r.level.Level(); old != level {
		r.level.Set(level)
		r.log.Log().Str("from", old.String()).Str("to", level.String()).Msg("log level changed") // whatever the level
	}
}

func (r *runner) setSpec(ev cluster.SpecEvent) {
	r.mu.Lock()
	if ev.Deleted {
		r.deleted = true
	} else {
		r.spec, r.specRev, r.deleted = ev.Spec, ev.Rev, false
	}
	r.mu.Unlock()
	if !ev.Deleted {
		r.setLevel(ev.Spec)
	}
	for _, ch := range []chan struct{}{r.changed, r.lead} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (r *runner) currentSpec() (cluster.Spec, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spec, r.specRev, !r.deleted && live(r.spec.State)
}

// topology builds the topology of the spec at rev (once per revision).
func (r *runner) topology(spec cluster.Spec, rev uint64) (*topology.Topology, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.built[rev]; ok {
		return t, nil
	}
	t, err := r.build(spec.Settings)
	if err != nil {
		return nil, fmt.Errorf("topology %s with settings %v: %w", r.name, spec.Settings, err)
	}
	if t.Name != r.name {
		return nil, fmt.Errorf("the topology registered as %s builds one named %s; register it under its own name", r.name, t.Name)
	}
	clear(r.built)
	r.built[rev] = t
	return t, nil
}

func (r *runner) close() {
	r.mu.Lock()
	cancel := r.cancel
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-r.done
	}
}

// run follows the topology's generations until ctx ends or the topology
// stops; it campaigns to lead it meanwhile.
func (r *runner) run(parent context.Context) {
	defer close(r.done)
	ctx, cancel := context.WithCancel(parent)
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	defer cancel()
	defer r.endMembers(true)
	if reg := r.n.cfg.Runtime.Metrics; reg != nil {
		defer reg.Add(metrics.SourceFunc(r.writeMetrics))()
	}
	var err error
	for r.store == nil {
		if r.store, err = r.n.checkpointStore(ctx, r.name); err != nil {
			r.log.Warn().Err(err).Msg("cannot open the checkpoint store; retrying")
			if sleepCtx(ctx, time.Second); ctx.Err() != nil {
				return
			}
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.n.elector.Campaign(ctx, r.name, r.n.cfg.Name, r.leadTopology); err != nil {
			r.log.Error().Err(err).Msg("cannot campaign to lead the topology")
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watchLeader(ctx)
	}()
	gens := r.watchGenerations(ctx)
	tick := time.NewTicker(r.n.cfg.StatusEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case g := <-gens:
			r.onGeneration(ctx, g)
		case <-r.changed:
			spec, _, ok := r.currentSpec()
			switch {
			case !ok && len(r.members) > 0:
				// Killed (after the leader's final checkpoint) or finished:
				// the spouts are paused and every tree is done.
				r.endMembers(false)
			case ok && r.waiting != nil:
				g := *r.waiting
				r.waiting = nil
				if !g.Created.Before(spec.Submitted) {
					r.onGeneration(ctx, g)
				}
			}
		case m := <-r.failed:
			if r.members[m.slot] != m {
				continue // ended already
			}
			r.lastErr, r.failedGen, r.superseded = m.Err().Error(), m.g.Number, false
			r.log.Error().Err(m.Err()).Uint64("generation", m.g.Number).Msg("the tasks of this worker failed; the leader starts the next generation from the latest checkpoint")
			r.endMembers(true)
		case <-tick.C:
			r.report(ctx)
		}
	}
}

// watchLeader deposes the topology's leader when its process is gone:
// two presence probes in a row found no one there (its NATS connection
// closed), so a new leader takes over at once instead of when the dead
// one's lease expires.
func (r *runner) watchLeader(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	misses, last := 0, ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		leader, err := r.n.elector.Leader(ctx, r.name)
		if err != nil || leader == r.n.cfg.Name {
			misses = 0
			continue
		}
		if leader != last {
			misses, last = 0, leader
		}
		_, err = r.n.nc.Request(r.n.presenceSubject(leader), nil, 150*time.Millisecond)
		if !errors.Is(err, nats.ErrNoResponders) {
			misses = 0
			continue
		}
		if misses++; misses >= 2 {
			r.log.Warn().Str("leader", leader).Msg("the leader's process is gone; deposing it")
			if err := r.n.elector.Depose(ctx, r.name, leader); err != nil {
				r.log.Warn().Err(err).Msg("cannot depose the leader")
			}
			misses = 0
		}
	}
}

// watchGenerations relays the topology's generations, watching again when
// a watch breaks.
func (r *runner) watchGenerations(ctx context.Context) <-chan cluster.Generation {
	out := make(chan cluster.Generation)
	go func() {
		for ctx.Err() == nil {
			ch, err := r.n.gens.Watch(ctx, r.name)
			if err != nil {
				r.log.Warn().Err(err).Msg("cannot watch the topology's generations; retrying")
				sleepCtx(ctx, time.Second)
				continue
			}
			for g := range ch {
				if g.Number > r.newest.Load() {
					r.newest.Store(g.Number)
				}
				select {
				case out <- g:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// slots are the members of a generation in slot order.
func slots(g cluster.Generation) []string {
	var ms []string
	for _, m := range g.Assignment {
		if !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	slices.Sort(ms)
	return ms
}

// layout turns a cluster generation into the runtime's: slots, and the
// slot of every task.
func layout(g cluster.Generation) (Generation, error) {
	ms := slots(g)
	wg := Generation{Number: g.Number, Slots: len(ms), RestoreFrom: g.RestoreFrom, Assign: make([]int, len(g.Assignment))}
	if len(g.Moves) > 0 {
		wg.Incarnations, wg.DiedAt = make([]uint64, len(ms)), make([]time.Time, len(ms))
		for from, mv := range g.Moves {
			slot := slices.Index(ms, from)
			if slot < 0 {
				return wg, fmt.Errorf("generation %d moves the slot of %s, which has none", g.Number, from)
			}
			wg.Incarnations[slot], wg.DiedAt[slot] = mv.Incarnation, mv.At
		}
	}
	for task, m := range g.Assignment {
		if task < 0 || task >= len(wg.Assign) {
			return wg, fmt.Errorf("generation %d assigns task %d of %d", g.Number, task, len(wg.Assign))
		}
		wg.Assign[task] = slices.Index(ms, m)
	}
	return wg, nil
}

// onGeneration drops the tasks of the previous generation and starts this
// worker's tasks of g; for an amendment of the generation it runs, it
// starts the slots that moved here and drops those that moved away.
func (r *runner) onGeneration(ctx context.Context, g cluster.Generation) {
	switch {
	case g.Number < r.gen:
		return
	case g.Number == r.gen:
		r.onAmend(ctx, g)
		return
	}
	// Every task of the new generation restores its checkpoint: what the
	// old one holds is dropped, as if the process had died.
	r.endMembers(true)
	spec, rev, ok := r.currentSpec()
	if !ok {
		// The registry and the generations are watched apart, so the
		// first generation of a new submission can come before the
		// submission itself; it is joined when the submission comes
		// (a worker that dropped it stalled the generation's start
		// barrier for good).
		r.waiting = &g
		r.log.Debug().Uint64("generation", g.Number).Msg("a generation of a topology not running here; waiting for its submission")
		return
	}
	r.waiting = nil
	r.gen = g.Number
	mine := r.ownSlots(g)
	if len(mine) == 0 {
		r.lastErr, r.failedGen, r.superseded = "", 0, false
		if topo, err := r.topology(spec, rev); err == nil && Fingerprint(topo) != g.Fingerprint {
			// The leader gives tasks only to workers with its build.
			r.lastErr = fmt.Sprintf("this worker's build of %s is another version than the leader's (fingerprint %q here, %q in generation %d), so it runs none of its tasks; run the same binary on every worker", r.name, Fingerprint(topo), g.Fingerprint, g.Number)
			r.log.Error().Msg(r.lastErr)
			return
		}
		r.log.Info().Uint64("generation", g.Number).Msg("no tasks in this generation")
		return
	}
	for _, slot := range mine {
		if !r.joinSlot(ctx, g, spec, rev, slot) {
			return
		}
	}
}

// onAmend follows the moves of an amended generation: slots that moved
// here start, slots that moved away (this worker was taken for dead) stop
// as if crashed, and every member fences the earlier owners of the moved
// slots.
func (r *runner) onAmend(ctx context.Context, g cluster.Generation) {
	wg, err := layout(g)
	if err != nil {
		r.log.Error().Err(err).Uint64("generation", g.Number).Msg("cannot follow the generation's moves")
		return
	}
	mine := r.ownSlots(g)
	for slot, m := range r.members {
		if !slices.Contains(mine, slot) {
			r.log.Warn().Uint64("generation", g.Number).Int("slot", slot).Str("owner", g.Owner(slots(g)[slot])).Msg("this worker's slot moved to another while it was away; dropping its tasks")
			m.Crash()
			delete(r.members, slot)
		}
	}
	for _, m := range r.members {
		for slot, inc := range wg.Incarnations {
			if inc > 0 {
				m.fenceSlot(slot, FrameEpoch(g.Number, inc))
			}
		}
	}
	spec, rev, ok := r.currentSpec()
	if !ok {
		return
	}
	for _, slot := range mine {
		if m := r.members[slot]; m == nil || m.g.incarnation(slot) < wg.incarnation(slot) {
			if m != nil {
				m.Crash()
				delete(r.members, slot)
			}
			if !r.joinSlot(ctx, g, spec, rev, slot) {
				return
			}
		}
	}
}

// replaced reports whether err, from joining g, says that the checkpoint g
// restores is gone because newer ones replaced it: it is missing, and the
// store holds a complete epoch above it. A checkpoint missing without a
// newer one (a worker looking at another store) stays a failure.
func (r *runner) replaced(ctx context.Context, g cluster.Generation, err error) bool {
	if g.RestoreFrom == 0 || !errors.Is(err, checkpoint.ErrNoCheckpoint) || r.store == nil {
		return false
	}
	// The join's context may have ended with the generation; the store is
	// asked anyway, for as long as a restore's look at it would take.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replacedLookup)
	defer cancel()
	epochs, lerr := checkpoint.ListEpochs(lctx, r.store, r.name)
	if lerr != nil {
		return false
	}
	return slices.ContainsFunc(epochs, func(e checkpoint.EpochInfo) bool { return e.Epoch > g.RestoreFrom && e.Complete })
}

// replacedLookup bounds replaced's look at the checkpoint store.
const replacedLookup = 5 * time.Second

// ownSlots returns the slots of g this worker runs.
func (r *runner) ownSlots(g cluster.Generation) []int {
	var mine []int
	for slot, m := range slots(g) {
		if g.Owner(m) == r.n.cfg.Name {
			mine = append(mine, slot)
		}
	}
	return mine
}

// joinSlot starts this worker's tasks of slot in g, and reports whether
// it could.
func (r *runner) joinSlot(ctx context.Context, g cluster.Generation, spec cluster.Spec, rev uint64, slot int) bool {
	err := r.join(ctx, g, spec, rev, slot)
	switch {
	case err == nil:
		return true
	case ctx.Err() == nil && r.newest.Load() > g.Number && errors.Is(err, context.Canceled):
		r.log.Info().Uint64("generation", g.Number).Uint64("newer", r.newest.Load()).Msg("gave up joining a generation: a newer one is out")
	case r.replaced(ctx, g, err):
		// The generation has run on without this worker (it crashed and
		// came back) and taken newer checkpoints, whose retention deleted
		// the one it started from. Not a failure of the topology's tasks:
		// the leader starts the next generation without counting one.
		r.lastErr, r.failedGen, r.superseded = err.Error(), g.Number, true
		r.log.Warn().Err(err).Uint64("generation", g.Number).Int("slot", slot).Msg("cannot join the generation: newer checkpoints replaced the one it restores; the leader starts the next one from the latest")
	default:
		r.lastErr, r.failedGen, r.superseded = err.Error(), g.Number, false
		r.log.Error().Err(err).Uint64("generation", g.Number).Int("slot", slot).Msg("cannot run this worker's tasks of the generation; the leader starts the next one from the latest checkpoint")
	}
	return false
}

func (r *runner) join(ctx context.Context, g cluster.Generation, spec cluster.Spec, rev uint64, slot int) error {
	topo, err := r.topology(spec, rev)
	if err != nil {
		return err
	}
	if fp := Fingerprint(topo); fp != g.Fingerprint {
		return fmt.Errorf("this worker's %s is another version of the topology than the generation's (fingerprint %q here, %q in generation %d); run the same binary on every worker", r.name, fp, g.Fingerprint, g.Number)
	}
	cfg, err := r.config(spec)
	if err != nil {
		return err
	}
	// The generation's parallelism, not the submission's: a rebalance
	// written meanwhile (or refused, without checkpoints) is the next
	// generation's, and a slot that moves joins the one that runs.
	if g.Parallelism != nil {
		cfg.Parallelism = maps.Clone(g.Parallelism)
	}
	wg, err := layout(g)
	if err != nil {
		return err
	}
	jctx, joined := r.untilNewer(ctx, g.Number)
	m, err := JoinGeneration(jctx, topo, cfg, wg, slot, nil)
	joined()
	if err != nil {
		return err
	}
	r.members[slot] = m
	r.lastErr, r.failedGen, r.superseded = "", 0, false
	go func() {
		select {
		case <-m.Failed():
			select {
			case r.failed <- m:
			case <-m.stop:
			}
		case <-m.stop:
		}
	}()
	return nil
}

// untilNewer returns a context for joining generation gen that ends when
// a newer generation is out: the join restores a checkpoint, which over a
// connection that has just dropped can take until a request times out,
// and a worker that fell behind so must catch up at once rather than
// hold the new generation's start barrier meanwhile. Call joined when
// the join returns: only the join uses the context (the tasks outlive
// it), so it ends then.
func (r *runner) untilNewer(ctx context.Context, gen uint64) (jctx context.Context, joined func()) {
	jctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for r.newest.Load() <= gen {
			select {
			case <-jctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return jctx, cancel
}

// config is the runtime configuration of spec on this worker.
func (r *runner) config(spec cluster.Spec) (Config, error) {
	cfg, err := SpecConfig(r.n.cfg.Runtime, spec)
	if err != nil {
		return cfg, err
	}
	cfg.NATSURL, cfg.Checkpoints = r.n.cfg.NATSURL, r.store
	cfg.Logger = r.log
	cfg.positions, cfg.submitted = r.n.positions, spec.Submitted
	return cfg, nil
}

// endMembers stops this worker's tasks: crashed (dropped) or gracefully.
func (r *runner) endMembers(crash bool) {
	for slot, m := range r.members {
		m.end(crash)
		delete(r.members, slot)
	}
}

// setLeader records the generation this worker leads, for its reports.
func (r *runner) setLeader(l *Leader) {
	r.mu.Lock()
	r.leader = l
	r.mu.Unlock()
}

// writeMetrics shows the latest failover this worker led.
func (r *runner) writeMetrics(w *metrics.Writer) {
	if d := r.recovery.Load(); d > 0 {
		w.Add(metrics.Recovery, time.Duration(d).Seconds(), r.name)
	}
	w.Add(metrics.InvalidEntries, float64(r.invalid.Load()), r.name)
	w.Add(metrics.SlotMoves, float64(r.moves.Load()), r.name)
}

// quietKey is what the leader decides from in a report: the generation
// and its start, failures, whether the sources are done, and once the
// member's records stopped moving (idle: no record emitted or processed
// since the last look) the records it counts in flight, which the leader
// adds up over the members to see the end of a run without checkpoints
// (drained; a member's own count need not reach 0). A report with the
// same key as the last one put may wait (NodeConfig.quietEvery).
type quietKey struct {
	generation, failed, checkpoint, restoredFrom uint64
	err                                          string
	superseded, leader, begun                    bool
	tasks                                        int
	spoutsDone, idle                             bool
	unprocessed                                  int64 // when idle
	// drained: the sources are done and nothing is counted in flight. A
	// report that said so must not stand once records are counted again:
	// three rounds of it end a run without checkpoints (leading.drained),
	// and records still moving are not idle, so their count is not in the
	// key. Such a stale report once ended a local at-most-once run with
	// 433 records in flight.
	drained bool
}

func (rep Report) quietKey(idle bool) quietKey {
	k := quietKey{generation: rep.Generation, failed: rep.Failed, checkpoint: rep.Checkpoint, restoredFrom: rep.RestoredFrom,
		err: rep.Error, superseded: rep.Superseded, leader: rep.Leader, idle: idle}
	if st := rep.Status; st != nil {
		k.begun, k.tasks, k.spoutsDone = st.Begun, len(st.Tasks), true
		if idle {
			k.unprocessed = st.Unprocessed
		}
		for _, t := range st.Tasks {
			if t.Spout && (!t.Exhausted || t.Pending > 0) {
				k.spoutsDone = false
			}
		}
		k.drained = k.spoutsDone && st.Unprocessed == 0
	}
	return k
}

// report publishes what this worker runs of the topology.
func (r *runner) report(ctx context.Context) {
	rep := Report{Member: r.n.cfg.Name, Error: r.lastErr, Failed: r.failedGen, Superseded: r.superseded, Updated: time.Now()}
	for _, slot := range slices.Sorted(maps.Keys(r.members)) {
		m := r.members[slot]
		st := m.Status()
		if rep.Status == nil {
			rep.Status, rep.Generation, rep.RestoredFrom = &st, st.Generation, m.g.RestoreFrom
		} else {
			rep.Status.add(st)
		}
	}
	r.mu.Lock()
	if l := r.leader; l != nil {
		rep.Leader, rep.Checkpoint = true, l.Latest()
	}
	r.mu.Unlock()
	if quiet := r.n.cfg.quietEvery; quiet > 0 {
		idle := true
		if st := rep.Status; st != nil {
			idle = st.Records == r.lastRecords && st.Unprocessed == r.lastUnprocessed
			r.lastRecords, r.lastUnprocessed = st.Records, st.Unprocessed
		}
		key := rep.quietKey(idle)
		if key == r.lastKey && rep.Updated.Sub(r.lastPut) < quiet {
			return
		}
		r.lastKey, r.lastPut = key, rep.Updated
	}
	rctx, cancel := context.WithTimeout(ctx, r.n.cfg.StatusEvery)
	defer cancel()
	if err := r.n.statuses.Put(rctx, encodeReport(r.name, rep)); err != nil && ctx.Err() == nil {
		r.log.Debug().Err(err).Msg("cannot report status")
	}
}
