package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
)

// leading is the leader's work for one topology, for as long as it leads:
// it writes a new generation when the live workers or the submission
// change, begins and checkpoints the current one (Leader), stops the
// topology when it is killed, and ends it when its sources are exhausted.
type leading struct {
	r      *runner
	ctx    context.Context
	live   []cluster.Member
	procs  atomic.Pointer[[]process] // the live members' processes, for probe
	gone   map[process]bool          // live members whose process is gone (probe)
	lg     *Leader
	floor  uint64 // Floor of the generation it adopted last
	streak int    // consecutive status rounds in which the sources were done
	// Without checkpoints: the records the reports last showed sent and
	// not yet processed, and since when (checkFinished); the workers last
	// said to wait idle, not given tasks (decide).
	unprocessed      int64
	unprocessedSince time.Time
	idle             []string
	refused          uint64 // the submission's revision whose rebalance was refused
	// tasks are the tasks of the submission's revision tasksRev (tasksOf).
	tasks    []TaskRef
	tasksRev uint64
	decoded  map[string]decodedReport // by member (reports)
	// wrote is the revision of the submission this leader wrote last: a
	// decision on an older one (the watch has not delivered the write
	// yet) would act on a state that is over.
	wrote uint64

	// A failover in progress, for the recovery metric: when the loss of a
	// worker was noticed, and the generation that replaces it (once it
	// begins, the failover is over).
	lostAt     time.Time
	recovering *Leader

	// Restarts after a worker's tasks failed (a spout or bolt that could
	// not start or go on): how many in a row, the latest, and when the
	// next may come, so that a failure that recurs at once does not spin.
	failures  int
	failedAt  time.Time
	restartAt time.Time
	// rewinds tells, by spout, whether its source can rewind, for the
	// submission version rewindsRev (losesAgain).
	rewinds    map[string]bool
	rewindsRev uint64
}

// leadTopology is the election's onLead: it returns when ctx ends (the
// lead is lost, or the worker stops).
func (r *runner) leadTopology(ctx context.Context) {
	r.log.Info().Msg("leading the topology")
	l := &leading{r: r, ctx: ctx}
	defer l.closeLeader()
	ms := l.watchMembers()
	gone := make(chan map[process]bool)
	go l.probe(gone)
	tick := time.NewTicker(r.n.cfg.StatusEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			r.log.Info().Msg("no longer leading the topology")
			return
		case live, ok := <-ms:
			if !ok {
				ms = l.watchMembers()
				continue
			}
			l.live = live
			procs := make([]process, len(live))
			for i, m := range live {
				procs[i] = processOf(m)
			}
			l.procs.Store(&procs)
		case g := <-gone:
			l.gone = g
		case <-r.lead:
		case <-tick.C:
		}
		if l.live == nil || ctx.Err() != nil {
			// The first membership list comes first; a leader whose lead
			// has ended acts no more, though select may have picked
			// another case that was ready with ctx.Done.
			continue
		}
		if err := l.decide(); err != nil && ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("leader: will look again")
		}
	}
}

// watchMembers watches the live workers, retrying until it can.
func (l *leading) watchMembers() <-chan []cluster.Member {
	for l.ctx.Err() == nil {
		ch, err := l.r.n.members.Watch(l.ctx)
		if err == nil {
			return ch
		}
		l.r.log.Warn().Err(err).Msg("leader: cannot watch the members; retrying")
		sleepCtx(l.ctx, time.Second)
	}
	return nil
}

// probe asks every live member's process whether it is there, every
// 200ms, and sends the set of those gone (two "no responders" in a row)
// when it changes. A killed worker is gone from NATS at once, while its
// membership entry lives until its TTL runs out.
func (l *leading) probe(out chan<- map[process]bool) {
	nc := l.r.n.nc
	missed := absences{}
	var sent map[process]bool
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		procs := l.procs.Load()
		if procs == nil {
			continue
		}
		answers := make(map[process]error, len(*procs))
		for _, p := range *procs {
			_, answers[p] = nc.Request(l.r.n.presenceSubject(p.name), nil, 150*time.Millisecond)
		}
		if gone := missed.tally(answers); !maps.Equal(gone, sent) {
			select {
			case out <- gone:
				sent = gone
			case <-l.ctx.Done():
				return
			}
		}
	}
}

// process is one worker process: a worker started again has the name of
// the one that died, and another start.
type process struct {
	name    string
	started int64 // Member.Started, in Unix nanoseconds
}

func processOf(m cluster.Member) process { return process{m.Name, m.Started.UnixNano()} }

// absences counts, by process, the presence requests in a row that found
// no responder.
type absences map[process]int

// tally takes one round of answers, by process asked, and returns the
// processes gone: two "no responders" in a row. An answer resets the
// count; a timeout leaves it. A process not asked is forgotten: its
// entry expired, and a worker started again under its name is another
// process, which a miss of the dead one must not count against. It
// answers only once it has joined, so its first request may miss.
func (a absences) tally(answers map[process]error) map[process]bool {
	for p := range a {
		if _, ok := answers[p]; !ok {
			delete(a, p)
		}
	}
	gone := map[process]bool{}
	for p, err := range answers {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			a[p]++
		case err == nil:
			a[p] = 0
		}
		if a[p] >= 2 {
			gone[p] = true
		}
	}
	return gone
}

// lease is the leader's fencing check before it commits a checkpoint.
func (l *leading) lease() error { return cluster.LeaseValid(l.ctx) }

func (l *leading) closeLeader() {
	if l.lg != nil {
		l.lg.Close()
		l.r.setLeader(nil)
		l.lg = nil
	}
}

// eligible are the live workers that have this topology in the same
// version as this one.
func (l *leading) eligible() []string {
	want := l.r.n.prints[l.r.name]
	var names []string
	for _, m := range l.live {
		if fp, ok := m.Topologies[l.r.name]; ok && fp == want && !l.gone[processOf(m)] {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names
}

// decide looks at the submission, the live workers and the current
// generation, and acts.
func (l *leading) decide() error {
	r := l.r
	now := time.Now()
	l.noteRecovery()
	spec, specRev, ok := r.currentSpec()
	if !ok {
		l.closeLeader()
		return nil
	}
	if specRev < l.wrote {
		return nil
	}
	gen, genRev, err := r.n.gens.Current(l.ctx, r.name)
	invalid := false
	switch {
	case errors.Is(err, cluster.ErrNotFound):
		genRev = 0
	case errors.Is(err, cluster.ErrInvalidEntry):
		// Something else wrote over the generation. The workers ignore
		// it and run the one before; a new generation replaces it, as
		// after the loss of a worker (exactly-once rolls back to the
		// latest checkpoint).
		invalid = true
		r.invalid.Add(1)
		r.log.Warn().Err(err).Uint64("revision", genRev).Msg("writing a new generation over an invalid entry")
		gen = cluster.Generation{Topology: r.name}
		if l.lg != nil {
			// The one the workers still run, for kill, and its submission's
			// floor, for the restore.
			gen.Number, gen.Floor = l.lg.g.Number, l.floor
		}
	case err != nil:
		return err
	}
	topo, err := r.topology(spec, specRev)
	if err != nil {
		return l.refuse(spec, specRev, err)
	}
	cfg, err := r.config(spec)
	if err != nil {
		return l.refuse(spec, specRev, err)
	}
	tasks, err := l.tasksOf(topo, cfg, specRev)
	if err != nil {
		return l.refuse(spec, specRev, err)
	}
	switch spec.State {
	case cluster.StateKilling:
		return l.kill(spec, specRev, gen)
	case cluster.StateFinishing:
		return l.finish(spec, specRev, gen, topo, cfg)
	}
	names := l.eligible()
	if len(names) == 0 {
		return fmt.Errorf("no live worker has this version of %s", r.name)
	}
	ids := make([]int, len(tasks))
	par := map[string]int{}
	for i, t := range tasks {
		ids[i] = t.ID
		if t.Component != ackerComponent {
			par[t.Component] = t.Index + 1
		}
	}
	assign := l.place(tasks, ids, names)
	current := genRev != 0 && (invalid || !gen.Created.Before(spec.Submitted))
	owners := owners(gen)
	var reports []Report
	if current && !invalid {
		if reports, err = l.reports(); err != nil {
			return err
		}
	}
	failed, superseded := failedIn(reports, gen.Number, owners)
	checkpoints := cfg.checkpointEvery() > 0
	var reason string
	handover, lost := false, false
	switch {
	case invalid:
		reason, lost = "the generation entry was invalid", true
	case !current:
		reason = "submitted"
	case !allLive(owners, names):
		if !checkpoints && l.lg == nil {
			// A leader that has just taken over leads the running
			// generation before it moves anything: without checkpoints,
			// a new generation would start every task over.
			if err := l.adopt(gen, topo, cfg); err != nil {
				return err
			}
		}
		begun := false
		if l.lg != nil && l.lg.g.Number == gen.Number {
			_, begun = l.lg.beganAt()
		}
		if !checkpoints && !begun {
			// Its members say so before a new leader hears them.
			begun = slices.ContainsFunc(reports, func(rep Report) bool {
				return rep.Generation == gen.Number && rep.Status != nil && rep.Status.Begun
			})
		}
		if moved, dead, fresh, ok := l.move(gen, tasks, cfg, par, names, begun, now); ok {
			// The failover ends when the moved tasks run: their new owner
			// says it is ready.
			recovered := func() { r.recovery.Store(int64(time.Since(now))) }
			why := "moved a dead worker's stateless tasks to a live one; the trees in flight replay, nothing rolls back"
			if len(fresh) > 0 {
				why = "moved a dead worker's tasks to a live one WITHOUT their state, as the topology runs without checkpoints: " + strings.Join(fresh, ", ") + " start again from nothing (a spout over a rewindable source reads on from the position it wrote: at-least-once, before its oldest record not yet fully processed; at-most-once, after what it sent; other spouts' sources start again)"
			}
			if err := l.amend(gen, moved, genRev, recovered, why); err != nil {
				return err
			}
			r.moves.Add(int64(len(dead)))
			return nil
		}
		reason, lost = "worker "+strings.Join(missing(owners, names), ", ")+" left", true
	case len(failed) > 0 && superseded:
		reason, lost = "worker "+strings.Join(failed, ", ")+" came back to a generation that had run on", true
	case len(failed) > 0:
		if now.Before(l.restartAt) {
			return nil // backing off: the same failure came back at once
		}
		if now.Sub(l.failedAt) > failureMemory {
			l.failures = 0
		}
		l.failures++
		l.failedAt, l.restartAt = now, now.Add(restartBackoff(l.failures))
		reason, lost = "the tasks of worker "+strings.Join(failed, ", ")+" failed", true
		if spec.FailAfter > 0 && l.failures >= spec.FailAfter {
			r.log.Error().Int("times", l.failures).Str("why", reason).Msg("the topology failed: its tasks failed too often in a row")
			spec.Error = fmt.Sprintf("%s, %d times in a row", reason, l.failures)
			if l.lg != nil {
				spec.LastCheckpoint = l.lg.Latest()
			}
			return l.setState(spec, specRev, cluster.StateFailed)
		}
	case !maps.Equal(gen.Parallelism, par) && !checkpoints:
		// The running generation goes on: it may still finish.
		if l.refused != specRev {
			l.refused = specRev
			r.log.Error().Msg("a rebalance moves the tasks' state through a checkpoint, and this topology runs without checkpoints; it goes on with its parallelism (kill it and submit it again with the new one)")
		}
	case !maps.Equal(gen.Parallelism, par):
		reason, handover = "rebalanced", true
	case len(gen.Moves) == 0 && !maps.Equal(gen.Assignment, assign),
		len(gen.Moves) > 0 && !allLive(names, owners):
		// After moves the assignment is no longer the one the live workers
		// would get anew; only a worker without a slot is a join.
		joined := missing(names, owners)
		if back, ok := l.moveBack(gen, joined, now); ok && (checkpoints || !l.losesAgain(gen, joined, tasks, topo, specRev)) {
			return l.amend(gen, back, genRev, nil, "gave a worker that came back the slot that had moved away from it; the trees in flight replay")
		}
		if !checkpoints {
			// A handover would start every task again without its state.
			if !slices.Equal(l.idle, joined) {
				l.idle = joined
				r.log.Info().Strs("workers", joined).Msg("without checkpoints the running tasks keep their workers; the workers that joined get tasks when one of the others is lost")
			}
			break
		}
		reason, handover = "worker "+strings.Join(joined, ", ")+" joined", true
	}
	if reason == "" {
		if err := l.adopt(gen, topo, cfg); err != nil {
			return err
		}
		return l.checkFinished(spec, specRev, gen, reports)
	}
	var restore, floor uint64
	if checkpoints {
		if restore, floor, err = l.restorePoint(spec, gen, current, handover, Fingerprint(topo)); err != nil {
			return err
		}
	}
	l.closeLeader()
	next := cluster.Generation{Topology: r.name, Number: 1, Parallelism: par, Assignment: assign, RestoreFrom: restore, Floor: floor,
		Leader: r.n.cfg.Name, Created: time.Now(), Reason: reason, Fingerprint: Fingerprint(topo)}
	switch {
	case invalid:
		// Above every number before it (see cluster's checkNumber).
		next.Number = genRev + 1
	case genRev != 0:
		next.Number = gen.Number + 1
	}
	if _, err := r.n.gens.Next(l.ctx, next, genRev); err != nil {
		return err
	}
	r.log.Info().Uint64("generation", next.Number).Str("reason", reason).Uint64("restore_from", restore).Strs("workers", names).Msg("new generation")
	if lost && checkpoints && cfg.figures != nil {
		cfg.figures.rolledBack()
	}
	l.streak = 0
	if err := l.adopt(next, topo, cfg); err != nil {
		return err
	}
	if lost || l.recovering != nil {
		// A failover ends when the lost tasks run again: in this
		// generation, also when it replaced that of an earlier loss that
		// had not begun yet, which extends the failover.
		if l.recovering == nil {
			l.lostAt = now
		}
		l.recovering = l.lg
	}
	return nil
}

// place assigns the tasks to the workers names: by the node's Place, if
// it has one whose placement is whole, else by rendezvous hashing.
func (l *leading) place(tasks []TaskRef, ids []int, names []string) map[int]string {
	place := l.r.n.cfg.Place
	if place == nil {
		return withSpouts(tasks, cluster.Assign(l.r.name, ids, names))
	}
	assign := place(slices.Clone(tasks), slices.Clone(names))
	for _, id := range ids {
		if w, ok := assign[id]; !ok || !slices.Contains(names, w) {
			l.r.log.Error().Int("task", id).Str("worker", w).Strs("workers", names).Msg("the placement policy left a task out or named a worker that is not live; placing the generation by rendezvous hashing")
			return cluster.Assign(l.r.name, ids, names)
		}
	}
	if len(assign) != len(ids) {
		l.r.log.Error().Int("placed", len(assign)).Int("tasks", len(ids)).Msg("the placement policy placed tasks the topology does not have; placing the generation by rendezvous hashing")
		return cluster.Assign(l.r.name, ids, names)
	}
	return assign
}

// withSpouts moves each acker task to the worker of a spout task (acker i
// to spout task i mod the spouts) and returns assign. A spout's trees then
// go to an acker beside it (spoutExec.newTree): its INITs and the acker's
// completion notices stay inside the worker, two of the NATS hops of every
// tree (p50 complete latency at half load fell by a third in word count).
// The acker follows its spout's placement, so under rendezvous hashing it
// moves only when its spout does.
func withSpouts(tasks []TaskRef, assign map[int]string) map[int]string {
	var spouts []int
	for _, t := range tasks {
		if t.Spout {
			spouts = append(spouts, t.ID)
		}
	}
	if len(spouts) == 0 {
		return assign
	}
	for _, t := range tasks {
		if t.Component == ackerComponent {
			if w, ok := assign[spouts[t.Index%len(spouts)]]; ok {
				assign[t.ID] = w
			}
		}
	}
	return assign
}

// move gives the slots of gen's dead owners to live workers within the
// running generation when the recovery policy (rollsBack) does not roll
// back: every task of those slots is stateless
// (no spout, keyed or Stateful bolt, or transactional sink) and the
// guarantee is not exactly-once; and the generation has begun (begun),
// under this leader, with the submitted parallelism. The other tasks keep
// running with their state; the spouts replay the trees in flight when
// the slot's new owner announces itself (DESIGN.md section 4). Without
// checkpoints the policy moves every slot, stateful tasks included, which
// start without their state. It returns the amended generation, the dead owners and the
// stateful tasks moved (by TaskRef.Key).
func (l *leading) move(gen cluster.Generation, tasks []TaskRef, cfg Config, par map[string]int, names []string, begun bool, now time.Time) (next cluster.Generation, dead, fresh []string, ok bool) {
	if l.lg == nil || l.lg.g.Number != gen.Number || !begun || !maps.Equal(gen.Parallelism, par) || len(tasks) != len(gen.Assignment) {
		return gen, nil, nil, false
	}
	stateful := map[string][]string{} // by the slot's member in Assignment
	for _, t := range tasks {
		if t.Stateful {
			m := gen.Assignment[t.ID]
			stateful[m] = append(stateful[m], t.Key())
		}
	}
	next = gen
	next.Moves = maps.Clone(gen.Moves)
	if next.Moves == nil {
		next.Moves = map[string]cluster.Move{}
	}
	for slot, m := range slots(gen) {
		owner := gen.Owner(m)
		if slices.Contains(names, owner) {
			continue
		}
		inc := gen.Moves[m].Incarnation + 1
		if rollsBack(cfg.Guarantee, cfg.checkpointEvery() > 0, len(stateful[m]) == 0) || inc >= 1<<incarnationBits {
			return gen, nil, nil, false
		}
		// Rendezvous by slot, so that two leaders in turn choose alike.
		to := cluster.Assign(gen.Topology, []int{slot}, names)[slot]
		next.Moves[m] = cluster.Move{To: to, Incarnation: inc, At: now}
		fresh = append(fresh, stateful[m]...)
		if !slices.Contains(dead, owner) {
			dead = append(dead, owner)
		}
	}
	return next, dead, fresh, len(dead) > 0
}

// moveBack gives workers that came back the slots that moved away from
// them when they were taken for dead, within the running generation:
// cheaper than the handover a join otherwise is (a final checkpoint,
// every task restoring it), at the price of replaying the trees in
// flight. Only when every joined worker is such a one; otherwise the
// handover places them all. With checkpoints, only stateless slots move;
// without, the caller asks losesAgain first.
func (l *leading) moveBack(gen cluster.Generation, joined []string, now time.Time) (cluster.Generation, bool) {
	if len(joined) == 0 || l.lg == nil || l.lg.g.Number != gen.Number {
		return gen, false
	}
	if _, began := l.lg.beganAt(); !began {
		return gen, false
	}
	next := gen
	next.Moves = maps.Clone(gen.Moves)
	for _, w := range joined {
		mv, ok := gen.Moves[w]
		if !ok || mv.To == w || mv.Incarnation+1 >= 1<<incarnationBits {
			return gen, false
		}
		next.Moves[w] = cluster.Move{To: w, Incarnation: mv.Incarnation + 1, At: now}
	}
	return next, true
}

// losesAgain reports whether moving the slots of the joined workers back
// to them, in a topology without checkpoints, would start again tasks
// that keep state: a stateful bolt, or a spout over a source that cannot
// rewind (one over a rewindable source reads on from the position it
// wrote, spoutPositions). Such a slot stays where it moved: its state was
// lost once, with its worker, and the log said so at error level; moving
// it back would lose what it rebuilt since, and say nothing. The spouts'
// kinds are looked at once per submission version rev.
func (l *leading) losesAgain(gen cluster.Generation, joined []string, tasks []TaskRef, topo *topology.Topology, rev uint64) bool {
	if l.rewinds == nil || l.rewindsRev != rev {
		l.rewinds, l.rewindsRev = map[string]bool{}, rev
		for _, c := range topo.Components {
			if c.IsSpout() {
				_, l.rewinds[c.Name] = c.SpoutFn().(topology.Positioned)
			}
		}
	}
	for _, t := range tasks {
		if t.Stateful && !(t.Spout && l.rewinds[t.Component]) && slices.Contains(joined, gen.Assignment[t.ID]) {
			return true
		}
	}
	return false
}

// amend writes next, gen with slots moved, over gen at rev, holding the
// checkpoints until the moved slots' new owners are ready; then it calls
// done, if set.
func (l *leading) amend(gen, next cluster.Generation, rev uint64, done func(), why string) error {
	// Held before the amendment is out: a checkpoint begun after it could
	// ask the moved tasks before they subscribed.
	incs := map[int]uint64{}
	for slot, m := range slots(gen) {
		if mv, ok := next.Moves[m]; ok && mv != gen.Moves[m] {
			incs[slot] = mv.Incarnation
		}
	}
	cancel := l.lg.awaitMoves(incs, done)
	if _, err := l.r.n.gens.Amend(l.ctx, next, rev); err != nil {
		cancel()
		return err
	}
	for from, mv := range next.Moves {
		if mv != gen.Moves[from] {
			l.r.log.Warn().Uint64("generation", gen.Number).Str("slot_of", from).Str("to", mv.To).Uint64("incarnation", mv.Incarnation).Msg(why)
		}
	}
	return nil
}

// owners are the workers that run gen's slots, sorted.
func owners(gen cluster.Generation) []string {
	var out []string
	for _, m := range slots(gen) {
		if o := gen.Owner(m); !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// noteRecovery records the failover in progress as the topology's latest
// once its generation has begun: the time from noticing the loss until
// the lost tasks run again.
func (l *leading) noteRecovery() {
	if l.recovering == nil {
		return
	}
	if began, ok := l.recovering.beganAt(); ok {
		l.r.recovery.Store(int64(began.Sub(l.lostAt)))
		if f := l.r.n.cfg.Runtime.figures; f != nil {
			f.recovered(span{at: l.lostAt, done: began})
		}
		l.recovering = nil
	}
}

// refuse says why the submission cannot run; it stays submitted, so that
// an operator sees the reason in ackflow status and kills it.
// tasksOf returns the tasks of the submission at revision rev, topo and
// cfg being that revision's. They are built once per revision: Tasks calls
// every bolt's factory, and a leader decides every status round (every
// 5 ms in a local run), so a factory ran 200 times a second for nothing.
func (l *leading) tasksOf(topo *topology.Topology, cfg Config, rev uint64) ([]TaskRef, error) {
	if l.tasks != nil && l.tasksRev == rev {
		return l.tasks, nil
	}
	tasks, err := Tasks(topo, cfg)
	if err != nil {
		return nil, err
	}
	l.tasks, l.tasksRev = tasks, rev
	return tasks, nil
}

func (l *leading) refuse(spec cluster.Spec, rev uint64, err error) error {
	return fmt.Errorf("the submission cannot run: %w", err)
}

// adopt leads gen if this leader does not yet: it begins it, if its
// workers have not begun, and checkpoints it.
func (l *leading) adopt(gen cluster.Generation, topo *topology.Topology, cfg Config) error {
	l.floor = gen.Floor
	if l.lg != nil && l.lg.g.Number == gen.Number {
		return nil
	}
	l.closeLeader()
	wg, err := layout(gen)
	if err != nil {
		return err
	}
	if gen.Parallelism != nil {
		cfg.Parallelism = maps.Clone(gen.Parallelism) // as its members do (runner.join)
	}
	l.lg, err = LeadGeneration(l.ctx, topo, cfg, wg, l.lease)
	if err != nil {
		return err
	}
	l.r.setLeader(l.lg)
	return nil
}

// restorePoint returns the checkpoint epoch the next generation restores,
// and the floor below which no generation of the submission restores
// (cluster.Generation.Floor). The first generation of a submission starts
// from nothing, or with Resume from the latest checkpoint; its floor is
// the newest epoch in the store then (with Resume, the one before the
// resumed one), so that a later generation never goes back to an earlier
// submission's checkpoint. A later generation keeps the floor and restores
// the latest checkpoint above it, after a handover the final one it takes
// of the running generation.
func (l *leading) restorePoint(spec cluster.Spec, gen cluster.Generation, current, handover bool, fp string) (restore, floor uint64, err error) {
	if !current {
		epochs, err := checkpoint.ListEpochs(l.ctx, l.r.store, l.r.name)
		if err != nil {
			return 0, 0, err
		}
		var newest uint64
		if len(epochs) > 0 {
			newest = epochs[0].Epoch
		}
		if spec.Resume {
			rest, err := checkpoint.Latest(l.ctx, l.r.store, l.r.name, fp)
			switch {
			case err == nil:
				for _, skipped := range rest.Skipped {
					l.r.log.Warn().Err(skipped).Msg("a newer checkpoint was refused")
				}
				l.r.log.Info().Uint64("epoch", rest.Manifest.Epoch).Msg("resuming from a checkpoint")
				return rest.Manifest.Epoch, restoreFloor(newest+1, rest.Manifest.Epoch), nil
			case !errors.Is(err, checkpoint.ErrNoCheckpoint):
				return 0, 0, err
			}
			l.r.log.Warn().Msg("no checkpoint to resume from; starting from the beginning")
		}
		return 0, restoreFloor(newest+1, 0), nil
	}
	floor = gen.Floor
	if handover && l.lg != nil && l.lg.g.Number == gen.Number {
		fctx, cancel := context.WithTimeout(l.ctx, l.lg.r.cfg.CheckpointTimeout+5*time.Second)
		err := l.lg.Final(fctx)
		cancel()
		if err == nil {
			return l.lg.Latest(), floor, nil
		}
		l.r.log.Warn().Err(err).Msg("the handover checkpoint failed; the new generation starts from the latest one")
	}
	rest, err := latestAbove(l.ctx, l.r.store, l.r.name, fp, floor)
	switch {
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		return 0, floor, nil
	case err != nil:
		return 0, 0, err
	}
	return rest.Manifest.Epoch, floor, nil
}

// finish ends a topology without checkpoints whose sources are exhausted
// and whose records are all processed (state finishing): every member
// stops its tasks gracefully, so that its sinks commit, then the state
// finished. A leader that takes over from one that died midway ends the
// generation it adopts the same way; the members that had stopped
// already do not answer, and it waits for them only finishWait.
func (l *leading) finish(spec cluster.Spec, rev uint64, gen cluster.Generation, topo *topology.Topology, cfg Config) error {
	wait := l.r.n.cfg.Runtime.CheckpointTimeout + 5*time.Second
	if l.lg == nil || l.lg.g.Number != gen.Number {
		if err := l.adopt(gen, topo, cfg); err != nil {
			return err
		}
		wait = finishWait
	}
	fctx, cancel := context.WithTimeout(l.ctx, wait)
	err := l.finalize(fctx)
	cancel()
	if err != nil {
		l.r.log.Warn().Err(err).Msg("finishing: not every worker said its tasks stopped")
	}
	l.r.log.Info().Msg("the sources are exhausted and every record is processed; the topology is finished")
	return l.setState(spec, rev, cluster.StateFinished)
}

// finishWait is how long a leader that took over a finishing topology
// waits for its members to say they stopped.
const finishWait = 2 * time.Second

// kill stops a topology being killed: a final checkpoint (the spouts stop,
// every tree in flight completes, transactional sinks commit), then the
// state killed, which makes the workers stop their tasks.
func (l *leading) kill(spec cluster.Spec, rev uint64, gen cluster.Generation) error {
	if l.lg != nil && l.lg.g.Number == gen.Number {
		select {
		case <-l.lg.Begun():
			fctx, cancel := context.WithTimeout(l.ctx, l.lg.r.cfg.CheckpointTimeout+5*time.Second)
			err := l.finalize(fctx)
			cancel()
			if err != nil {
				l.r.log.Warn().Err(err).Msg("the final checkpoint of the killed topology failed; a resubmission with --resume starts from the one before")
			}
			spec.LastCheckpoint = l.lg.Latest()
		default:
		}
	}
	return l.setState(spec, rev, cluster.StateKilled)
}

// finalize ends the generation before the topology's state says killed
// or finished: its final checkpoint, or without checkpoints every member
// stopping its tasks gracefully, so that what the sinks hold is committed
// when the state is out.
func (l *leading) finalize(ctx context.Context) error {
	if l.lg.coord == nil {
		if err := l.lg.End(ctx); err != nil {
			// The members still stop when they see the state.
			l.r.log.Warn().Err(err).Msg("ending the generation: not every worker said its tasks stopped")
		}
		return nil
	}
	return l.lg.Final(ctx)
}

// checkFinished ends a topology whose sources are all exhausted and whose
// trees are all done, as three status rounds in a row report.
func (l *leading) checkFinished(spec cluster.Spec, rev uint64, gen cluster.Generation, reports []Report) error {
	select {
	case <-l.lg.Begun():
	default:
		return nil
	}
	done := map[string]bool{}
	exhausted := map[int]bool{} // spout tasks, as their owners report them
	for _, rep := range reports {
		if rep.Generation != gen.Number || rep.Status == nil || !rep.Status.Begun {
			continue
		}
		ok := true
		for _, t := range rep.Status.Tasks {
			if !t.Spout {
				continue
			}
			if !t.Exhausted || t.Pending > 0 {
				ok = false
			} else if gen.Owner(gen.Assignment[t.Task]) == rep.Member {
				exhausted[t.Task] = true
			}
		}
		done[rep.Member] = ok
	}
	for _, m := range owners(gen) {
		if !done[m] {
			l.streak = 0
			return nil
		}
	}
	// A spout whose slot has just moved is in no report yet: its new
	// owner has not started it.
	for id, t := range l.lg.r.plan.tasks {
		if t.comp != nil && t.comp.IsSpout() && !exhausted[id] {
			l.streak = 0
			return nil
		}
	}
	if l.lg.r.cfg.checkpointEvery() == 0 && !l.drained(gen, reports) {
		l.streak = 0
		return nil
	}
	if l.streak++; l.streak < 3 {
		return nil
	}
	if l.lg.r.cfg.checkpointEvery() == 0 {
		// Ending the generation stops every task; the state says so
		// first, so that a leader taking over midway ends it too rather
		// than wait for tasks that have stopped (finish).
		spec.State = cluster.StateFinishing
		next, err := l.r.n.registry.Update(l.ctx, spec, rev)
		if err != nil {
			return err
		}
		l.wrote = next
		return nil // the next round, on the new state, finishes it
	}
	fctx, cancel := context.WithTimeout(l.ctx, l.lg.r.cfg.CheckpointTimeout+5*time.Second)
	err := l.finalize(fctx)
	cancel()
	if err != nil {
		l.streak = 0
		return fmt.Errorf("the sources are exhausted but the final checkpoint failed: %w", err)
	}
	l.r.log.Info().Uint64("epoch", l.lg.Latest()).Msg("the sources are exhausted and every record is processed; the topology is finished")
	spec.LastCheckpoint = l.lg.Latest()
	return l.setState(spec, rev, cluster.StateFinished)
}

// drained reports whether no record is in flight in gen, for a topology
// without checkpoints, whose end has no final checkpoint to drain the
// records (at-most-once tracks no trees, and an at-least-once tree may
// be done while a record it sent is still queued). Records lost with a
// dead worker never arrive: it waits for them only until the count has
// not moved for unprocessedQuiet.
func (l *leading) drained(gen cluster.Generation, reports []Report) bool {
	var sum int64
	for _, rep := range reports {
		if rep.Generation == gen.Number && rep.Status != nil {
			sum += rep.Status.Unprocessed
		}
	}
	if sum != l.unprocessed || l.unprocessedSince.IsZero() {
		l.unprocessed, l.unprocessedSince = sum, time.Now()
	}
	return sum == 0 || time.Since(l.unprocessedSince) >= unprocessedQuiet
}

// unprocessedQuiet is how long drained waits for records that do not
// arrive.
const unprocessedQuiet = 1500 * time.Millisecond

// reports reads the workers' status reports of the topology, skipping
// any that cannot be read.
func (l *leading) reports() ([]Report, error) {
	crs, err := l.r.n.statuses.List(l.ctx, l.r.name)
	if err != nil {
		return nil, err
	}
	out := make([]Report, 0, len(crs))
	if l.decoded == nil {
		l.decoded = map[string]decodedReport{}
	}
	for _, cr := range crs {
		// A report that has not changed since the last round is not
		// decoded again: a local run's leader looks every 5 ms.
		if d, ok := l.decoded[cr.Member]; ok && bytes.Equal(d.data, cr.Data) {
			out = append(out, d.rep)
			continue
		}
		if rep, err := DecodeReport(cr); err == nil {
			out = append(out, rep)
			l.decoded[cr.Member] = decodedReport{data: cr.Data, rep: rep}
		}
	}
	return out, nil
}

// decodedReport is a member's report as the leader last read it.
type decodedReport struct {
	data []byte
	rep  Report
}

// failedIn returns, as "worker (why)", the owners of generation gen whose
// tasks failed in it. Such a generation cannot go on (its start barrier
// or its trees wait for those tasks), so the leader starts the next one
// from the latest checkpoint, as after the loss of a worker. superseded
// says that every one of them only found the generation's checkpoint gone
// (Report.Superseded): no task of the topology failed.
func failedIn(reports []Report, gen uint64, owners []string) (failed []string, superseded bool) {
	superseded = true
	for _, rep := range reports {
		if rep.Failed == gen && slices.Contains(owners, rep.Member) {
			failed = append(failed, rep.Member+" ("+rep.Error+")")
			superseded = superseded && rep.Superseded
		}
	}
	slices.Sort(failed)
	return failed, superseded && len(failed) > 0
}

// failureMemory is how long a run of restarts after failures is
// remembered: a failure after a generation has run that long without one
// restarts at once again.
const failureMemory = time.Minute

// restartBackoff is how long the leader waits after the nth restart in a
// row for failed tasks before it restarts again: 0.5 s, doubling up to
// 30 s. A failure that recurs at once (a source that is down, a bolt that
// cannot prepare) then costs a generation now and then, not a stream of
// them, while its worker's report and the generation's reason say why.
func restartBackoff(n int) time.Duration {
	return min(500*time.Millisecond<<min(n-1, 10), 30*time.Second)
}

// setState moves the submission to state.
func (l *leading) setState(spec cluster.Spec, rev uint64, state string) error {
	spec.State = state
	next, err := l.r.n.registry.Update(l.ctx, spec, rev)
	if err != nil {
		return err
	}
	l.wrote = next
	l.closeLeader()
	return nil
}

// allLive reports whether every one of want is in live.
func allLive(want, live []string) bool { return len(missing(want, live)) == 0 }

// missing returns those of want not in have.
func missing(want, have []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			out = append(out, w)
		}
	}
	return out
}

// rollsBack is the recovery policy for a worker slot that died: roll
// every task back to the latest checkpoint, or give the slot a new owner
// (another worker) and replay only the trees in flight. A slot with state
// (a spout, a keyed or Stateful bolt, a transactional sink) rolls back
// when there are checkpoints to restore; without them its state is lost
// either way. In exactly-once any death rolls back, not
// only one that held state: replays after a death come out of the
// sources' order, which event-time logic cannot always absorb, while a
// rollback replays in order.
func rollsBack(g Guarantee, checkpoints, stateless bool) bool {
	return checkpoints && (g == ExactlyOnce || !stateless)
}
