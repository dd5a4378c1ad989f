package workers

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	rtrace "runtime/trace"
	"strconv"
	"time"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
)

// pendingRoot is a spout record whose tree is in flight: the spout's
// upstream backup, replayed as a new tree with the same record ID on failure.
type pendingRoot struct {
	id       topology.MsgID
	recordID uint64
	stream   string
	values   topology.Values
	start    time.Time
	bytes    int64
	tree     uint64 // current attempt
	trouble  *rootTrouble
	direct   int32  // task ID for EmitDirect, -1 otherwise
	attempts int32  // attempts emitted
	done     bool   // acked (perhaps by an earlier attempt completing late) or dead-lettered
	mark     uint32 // at least once over a rewindable source: the rootMark it counts in (rootMarks)
}

// rootTrouble is what a root needs only once one of its attempts failed
// or a crash waits for it. Most roots are emitted once and acked: kept
// apart, it makes their pendingRoot, allocated per root, 128 bytes instead
// of 224 (the spout's pendingRoots were a tenth of the bytes word count
// allocated, and every byte allocated brings the next collection closer).
type rootTrouble struct {
	crashes     []int64   // crashes whose recovery waits for this root
	failures    int       // attempts that failed in the topology (MaxAttempts counts these)
	letterFails int       // failed writes to the dead letters
	why         failure   // the last failure
	trees       []uint64  // the failed attempts' trees, while abandons (at most maxAbandoned)
	due         time.Time // when a delayed replay is due
	heapIdx     int       // index in spoutExec.delayed, -1 when not there
}

// troubled returns p's rootTrouble, made on first use.
func (p *pendingRoot) troubled() *rootTrouble {
	if p.trouble == nil {
		p.trouble = &rootTrouble{heapIdx: -1}
	}
	return p.trouble
}

// failure is why an attempt of a root failed.
type failure struct {
	counted bool   // a failure in the topology, not a worker's death
	task    int32  // the task that failed it, -1 when none (timeout, death)
	err     string // the reason, for the dead letters
}

// recovery tracks the roots replayed after a crash.
type recovery struct {
	remaining int
	at        time.Time
}

// retiredTree is an attempt the spout gave up on (timeout, crash) that may
// still complete: if it does, the root is done and its replay is dropped.
type retiredTree struct {
	p  *pendingRoot
	at time.Time
}

// deadNote is a DeadLettered call waiting to be delivered outside Next.
type deadNote struct {
	id  topology.MsgID
	why string
}

// spoutExec runs one spout task and its side of the acking protocol.
type spoutExec struct {
	base
	spout      topology.Spout
	selfReplay bool
	// abandons: the runtime dead-letters roots (MaxAttempts; not for a
	// spout that replays itself) and stateful bolts downstream keep
	// output logs, so a dead-lettered root's trees are told to them
	// (abandon).
	abandons  bool
	deadAware topology.DeadLetterAware // nil unless the spout implements it
	positions *spoutPositions          // over a rewindable source without checkpoints: see spoutPositions
	hold      flushHold                // when partial frames go out (run)

	pending      map[uint64]*pendingRoot // tree ID -> root
	pendingBytes int64
	window       pendingWindow // how many trees may be pending
	replayQ      []*pendingRoot
	delayed      delayQueue       // replays waiting out their backoff
	acks, fails  []topology.MsgID // delivered to the spout outside Next
	dead         []deadNote
	exhausted    bool
	emitted      int
	recovering   map[int64]*recovery // by crash ID
	retired      map[uint64]retiredTree
	lastScan     time.Time
	paused       *spoutPause   // a checkpoint in progress: no new roots
	localAckers  []int         // indices into plan.ackers of the ackers in this worker (localAckers)
	anchors      []wire.Anchor // slab the roots' anchors are carved from
	roots        []pendingRoot // slab new roots' bookkeeping is carved from (rootSlab)
	now          time.Time     // clock's reading, and how many more roots it serves
	nowUses      int
}

// clock returns the time a root is emitted at: a reading serves up to
// clockUses roots, which a Next emits within microseconds of each other,
// since a clock reading per root was a tenth of the spout's CPU on a
// virtual machine. The run loop starts a fresh reading at every round.
func (s *spoutExec) clock() time.Time {
	if s.nowUses == 0 {
		s.now, s.nowUses = time.Now(), clockUses
	}
	s.nowUses--
	return s.now
}

// clockUses is how many roots one clock reading serves.
const clockUses = 8

func newSpoutExec(b base) *spoutExec {
	s := &spoutExec{base: b, spout: b.info.comp.SpoutFn(), pending: map[uint64]*pendingRoot{}, recovering: map[int64]*recovery{}, retired: map[uint64]retiredTree{},
		window: newPendingWindow(b.r.cfg.MaxSpoutPending, time.Now())}
	b.r.exhausted[b.info.id].Store(false) // a restarted spout reads again
	if sr, ok := s.spout.(topology.SelfReplaying); ok {
		s.selfReplay = sr.ReplaysItself()
	}
	s.deadAware, _ = s.spout.(topology.DeadLetterAware)
	s.abandons = s.track && !s.selfReplay && b.r.cfg.MaxAttempts > 0 && len(b.r.plan.holdersBelow(s.info.id)) > 0
	if s.track {
		s.showWindow()
	}
	s.localAckers = localAckers(b.r.plan, b.w.slot)
	s.positions = newSpoutPositions(s)
	return s
}

// persistPositions writes the position of a spout over a rewindable
// source without checkpoints (at most once sending what its outbox
// holds), when that is due at now, or at once for a zero now
// (spoutPositions.persist). Every flush comes before a call, so it also
// tells the run, once the outbox is empty, that the source is done
// (showExhausted).
func (s *spoutExec) persistPositions(now time.Time) {
	if s.positions != nil {
		s.positions.persist(now)
	}
	s.showExhausted()
}

// showExhausted tells the run that the spout's source is done, once
// everything it read has left its outbox: nothing waits in a partial
// frame, or is held for a position write. A run that ended before those
// frames were sent would drop them; and at most once, where the end waits
// for the records sent and not yet processed to come to 0, a partial
// frame is not yet counted as sent.
func (s *spoutExec) showExhausted() {
	if s.exhausted && len(s.out.held) == 0 && len(s.out.dirty) == 0 {
		s.r.exhausted[s.info.id].Store(true)
	}
}

// spoutHold is how soon after its last flush a spout that has nothing more
// to emit flushes again. A paced spout is woken by every completion notice
// and emitted the few records due since, so flushing at once sent frames
// of two or three lines: at an eighth of word count's peak the process
// spent 1.2 of its 2 cores on them (docs/performance.md, round eleven).
// Holding a partial frame for at most this long (a timer flushes it, so
// nothing waits for the tick) lets it gather the records of the next
// wake-ups.
const spoutHold = 250 * time.Microsecond

// flushHold decides when an idle spout flushes its partial frames.
type flushHold struct{ last time.Time } // when an idle flush last sent something

// wait returns how long to hold the partial frames at now, or 0 to flush
// them now (and it records the flush). With nothing to send it returns 0:
// the flush only fails the trees of records that could not be sent.
func (h *flushHold) wait(now time.Time, partial bool) time.Duration {
	if !partial {
		return 0
	}
	if w := h.last.Add(spoutHold).Sub(now); w > 0 {
		return w
	}
	h.last = now
	return 0
}

// flushed records a flush of held frames at now.
func (h *flushHold) flushed(now time.Time) { h.last = now }

func (s *spoutExec) run(ctx context.Context) {
	if err := s.guard("Open", func() error { return s.spout.Open(s.tc, s) }); err != nil {
		s.startFailed(ctx, err)
		return
	}
	if err := s.restore(); err != nil {
		s.startFailed(ctx, err)
		return
	}
	if s.positions != nil {
		switch err := s.positions.start(ctx); {
		case errors.Is(err, topology.ErrNoPosition):
			// The source keeps its progress itself (a JetStream durable
			// consumer): nothing to write.
			s.positions, s.out.gated = nil, false
			s.tc.Logger.Debug().Err(err).Msg("the spout's source keeps its own progress; its position is not written")
		case err != nil:
			s.startFailed(ctx, err)
			return
		}
	}
	tick := time.NewTicker(min(s.r.cfg.Linger, 10*time.Millisecond))
	defer tick.Stop()
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	defer hold.Stop()
	held := false // hold is armed for a partial frame
	s.lastScan = time.Now()
	idle := 0
	defer s.publish()
	for {
		s.publish()
		s.nowUses = 0 // a fresh clock reading for this round's roots
		s.ctrl.drain(s.onCtrl)
		s.drainSys()
		s.deliver()
		s.checkDrained()
		if ctx.Err() != nil {
			return
		}
		busy := false
		switch replay, read := s.mayEmit(); {
		case replay:
			n := min(len(s.replayQ), s.r.cfg.BatchSize)
			for _, p := range s.replayQ[:n] {
				if !p.done {
					s.replay(p)
				}
			}
			s.replayQ = append(s.replayQ[:0], s.replayQ[n:]...)
			busy = true
		case read:
			before := s.emitted
			err := s.guard("Next", func() error { return s.spout.Next(ctx) })
			switch {
			case errors.Is(err, topology.ErrExhausted):
				s.exhausted = true
				s.showExhausted()
			case err != nil && ctx.Err() == nil:
				s.r.abort(err)
				return
			}
			busy = s.emitted > before
			if s.positions != nil && len(s.out.held) >= positionHold {
				s.persistPositions(time.Now())
			}
		}
		s.r.pending[s.info.id].Store(int64(len(s.pending) + len(s.replayQ) + len(s.delayed)))
		if busy {
			if idle++; idle&63 == 0 {
				s.housekeep(time.Now())
			}
			continue
		}
		if !held {
			if wait := s.hold.wait(time.Now(), len(s.out.dirty) > 0); wait > 0 {
				hold.Reset(wait)
				held = true
			} else {
				s.out.flush()
				s.persistPositions(time.Now())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.ctrl.ready:
			s.ctrl.drain(s.onCtrl)
		case <-s.sys.ready:
			s.sys.drain(s.onSys)
		case now := <-tick.C:
			s.housekeep(now)
		case now := <-hold.C:
			held = false
			s.hold.flushed(now)
			s.out.flush()
			s.persistPositions(now)
		}
	}
}

// showWindow publishes the pending window's size for metrics and the
// summary. The counters are the task's, which a restarted spout shares
// with the one it replaces while that one stops.
func (s *spoutExec) showWindow() {
	n := int64(s.window.size)
	s.cnt.window.Store(n)
	for peak := s.cnt.windowPeak.Load(); n > peak && !s.cnt.windowPeak.CompareAndSwap(peak, n); peak = s.cnt.windowPeak.Load() {
	}
}

// guard runs user code, turning a panic into an error that names the spout.
func (s *spoutExec) guard(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("workers: spout %s task %d panicked in %s: %v", s.info.name, s.info.id, what, p)
		}
	}()
	if err = fn(); err != nil && !errors.Is(err, topology.ErrExhausted) {
		err = fmt.Errorf("workers: spout %s task %d: %s: %w", s.info.name, s.info.id, what, err)
	}
	return err
}

// mayEmit reports whether the spout may replay failed roots now, and
// whether it may read its source. Full queues anywhere pause both; full
// output logs stop reads only (DESIGN.md section 4), since only a failed
// tree's replay trims the entries it left in them (pressure, logsFull).
// The spout's own bounds, on pending bytes and its pending window, hold
// back both; a failed root has left them, so they never hold back its
// replay for long.
func (s *spoutExec) mayEmit() (replay, read bool) {
	p := pressure(s.w.throttle.Load())
	replay = p < queuesFull && len(s.replayQ) > 0
	read = p == noPressure && !s.exhausted && s.paused == nil && (s.positions == nil || !s.positions.blocks())
	if !s.track {
		return replay, read
	}
	if s.pendingBytes >= s.r.cfg.MaxPendingBytes {
		replay, read = false, false
	}
	// The window holds the spout back only when nothing else does and it
	// has records to emit (pendingWindow.admits).
	if !s.window.admits(len(s.pending), replay || read) {
		return false, false
	}
	return replay, read
}

func (s *spoutExec) housekeep(now time.Time) {
	if s.track {
		s.window.resize(now)
		s.showWindow()
	}
	s.r.held[s.info.id].Store(int64(s.out.poll(now)))
	s.persistPositions(now)
	s.linkTick(now)
	for len(s.delayed) > 0 && !s.delayed[0].trouble.due.After(now) {
		p := heap.Pop(&s.delayed).(*pendingRoot)
		s.replayQ = append(s.replayQ, p)
	}
	if s.track && now.Sub(s.lastScan) >= s.r.cfg.MessageTimeout/4 {
		s.lastScan = now
		for tree, p := range s.pending {
			if now.Sub(p.start) >= s.r.cfg.MessageTimeout {
				s.cnt.timedOut.Add(1)
				s.retire(tree, p, now)
				s.failTree(tree, p, failure{counted: true, task: -1, err: fmt.Sprintf("timed out: not fully processed within the message timeout (%v)", s.r.cfg.MessageTimeout)})
			}
		}
		for tree, rt := range s.retired {
			if now.Sub(rt.at) >= 2*s.r.cfg.MessageTimeout {
				delete(s.retired, tree)
			}
		}
	}
}

// retire remembers an attempt given up on without the acker's verdict.
func (s *spoutExec) retire(tree uint64, p *pendingRoot, now time.Time) {
	s.retired[tree] = retiredTree{p: p, at: now}
}

// deliver calls Ack, Fail and DeadLettered outside Next, so the spout never
// sees them re-entrantly.
func (s *spoutExec) deliver() {
	for _, id := range s.acks {
		s.userCall("Ack", func() { s.spout.Ack(id) })
	}
	s.acks = s.acks[:0]
	for _, id := range s.fails {
		s.userCall("Fail", func() { s.spout.Fail(id) })
	}
	s.fails = s.fails[:0]
	for _, d := range s.dead {
		s.userCall("DeadLettered", func() { s.deadAware.DeadLettered(d.id, d.why) })
	}
	s.dead = s.dead[:0]
}

// userCall runs a spout callback; a panic is logged and the task goes on,
// as an Execute panic does in a bolt.
func (s *spoutExec) userCall(what string, fn func()) {
	defer func() {
		if p := recover(); p != nil {
			s.cnt.panics.Add(1)
			s.r.warn.Error().Str("component", s.info.name).Int("task", s.info.id).Interface("panic", p).Msgf("spout %s panicked", what)
		}
	}()
	fn()
}

func (s *spoutExec) onCtrl(f *wire.Frame) {
	if !s.admit(f) {
		return
	}
	if f.Kind == wire.KindLink {
		s.onLink(f)
		return
	}
	now := time.Now()
	for _, n := range f.Notices {
		p := s.pending[n.Tree]
		if p == nil {
			// An attempt given up on may still complete: then the root is
			// done, and its replay is not needed.
			if rt, ok := s.retired[n.Tree]; ok && n.Type == wire.NoticeComplete {
				delete(s.retired, n.Tree)
				s.complete(rt.p, now)
			}
			continue
		}
		switch n.Type {
		case wire.NoticeComplete:
			s.complete(p, now)
		case wire.NoticeFailed:
			s.failTree(n.Tree, p, s.failureOf(n))
		case wire.NoticeReset:
			p.start = now
		}
	}
	s.r.recycle(f)
}

// failureOf describes a NoticeFailed for the dead letters.
func (s *spoutExec) failureOf(n wire.Notice) failure {
	why := failure{counted: true, task: n.Task, err: n.Err}
	if why.err == "" {
		why.err = "failed"
		if c := s.componentOf(n.Task); c != "" {
			why.err = "failed by " + c
		}
	}
	return why
}

// componentOf names the component of a task, or "" for none.
func (s *spoutExec) componentOf(task int32) string {
	if task < 0 || int(task) >= len(s.r.plan.tasks) {
		return ""
	}
	return s.r.plan.tasks[task].name
}

// A tree that takes slowTree or more to complete is logged as an event of
// the execution trace, when one is running (runtime/trace, go test
// -trace), with its latency in microseconds: tools/tailtrace reads them
// and says what the slow trees coincided with (docs/performance.md).
const (
	slowTree         = 5 * time.Millisecond
	slowTreeCategory = "ackflow.slow-tree"
)

// rootDone marks p done: acked, dead-lettered, or handed back to a spout
// that replays it itself (such a spout keeps no marks). Its task starting
// again will not read it again once the roots read before it are done
// too (rootMarks).
func (s *spoutExec) rootDone(p *pendingRoot) {
	p.done = true
	if s.positions != nil && s.positions.marks != nil {
		s.positions.marks.done(p)
	}
}

// complete acks a root once, whichever of its attempts completed.
func (s *spoutExec) complete(p *pendingRoot, now time.Time) {
	if p.done {
		return
	}
	s.rootDone(p)
	s.cnt.lastTree.Store(now.UnixNano())
	if s.pending[p.tree] == p {
		delete(s.pending, p.tree)
		s.pendingBytes -= p.bytes
		d := now.Sub(p.start)
		if d >= slowTree && rtrace.IsEnabled() {
			rtrace.Log(context.Background(), slowTreeCategory, strconv.FormatInt(d.Microseconds(), 10))
		}
		s.cnt.latency.observe(d)
		if s.cnt.complete != nil {
			s.cnt.complete.Observe(d)
		}
	}
	if p.trouble != nil && p.trouble.heapIdx >= 0 {
		heap.Remove(&s.delayed, p.trouble.heapIdx)
	}
	s.tally.acked++
	s.acks = append(s.acks, p.id)
	s.recovered(p, now)
}

// failTree handles a failed attempt of p: a replay, at once or after a
// backoff, or the dead letters once MaxAttempts attempts failed.
func (s *spoutExec) failTree(tree uint64, p *pendingRoot, why failure) {
	delete(s.pending, tree)
	s.pendingBytes -= p.bytes
	s.cnt.failed.Add(1)
	s.fails = append(s.fails, p.id)
	p.troubled().why = why
	if t := p.trouble; s.abandons && len(t.trees) < maxAbandoned {
		t.trees = append(t.trees, tree)
	}
	if s.selfReplay {
		s.rootDone(p)
		s.recovered(p, time.Now())
		return
	}
	if !why.counted {
		s.replayQ = append(s.replayQ, p)
		return
	}
	t := p.troubled()
	t.failures++
	if limit := s.r.cfg.MaxAttempts; limit > 0 && t.failures >= limit {
		s.deadLetter(p)
		return
	}
	s.schedule(p, s.backoff(t.failures))
}

// schedule queues p's replay after d.
func (s *spoutExec) schedule(p *pendingRoot, d time.Duration) {
	if d <= 0 {
		s.replayQ = append(s.replayQ, p)
		return
	}
	p.troubled().due = time.Now().Add(d)
	heap.Push(&s.delayed, p)
}

// backoff is the delay before the replay after the n-th counted failure:
// none after the first (most failures are transient), then exponential.
func (s *spoutExec) backoff(n int) time.Duration {
	base, limit := s.r.cfg.ReplayBackoff, s.r.cfg.MaxReplayBackoff
	if n <= 1 || base <= 0 {
		return 0
	}
	d := base
	for i := 2; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// deadLetter gives up on p: it goes to the dead letters with its last
// error, and the spout hears of it. If the dead letters cannot take it, p
// stays alive and is replayed after the longest backoff, so it is never
// lost.
func (s *spoutExec) deadLetter(p *pendingRoot) {
	t := p.troubled()
	comp := s.componentOf(t.why.task)
	l := s.letter(p.stream, p.id, p.recordID, p.values, int(p.attempts), t.why.err, comp, int(t.why.task))
	if err := s.putLetter(l); err != nil {
		if t.letterFails++; t.letterFails >= maxLetterFails {
			s.r.abort(fmt.Errorf("workers: the dead letters failed %d times for record %016x of %s (offset %d), which is therefore neither processed nor dead-lettered; fix the dead-letter destination and run again: %w",
				t.letterFails, p.recordID, s.info.name, p.id.Offset, err))
			return
		}
		s.schedule(p, s.r.cfg.MaxReplayBackoff)
		return
	}
	s.rootDone(p)
	s.abandon(t.trees)
	s.r.warn.Warn().Str("component", s.info.name).Int("task", s.info.id).Uint64("record", p.recordID).Int("attempts", int(p.attempts)).Str("error", t.why.err).Msg("record sent to the dead letters after too many failed attempts")
	s.recovered(p, time.Now())
}

// abandon tells every task that keeps an output log that the trees of a
// dead-lettered root are over, as the acker tells it that a tree
// completed: their entries leave the log, and the inputs are remembered
// as done, so a late copy of one is dropped as a duplicate, not run
// again (the root is in the dead letters; its processing may be
// partial). Nothing else removes them before they expire, ten message
// timeouts later (5 minutes by default): a flood of dead-lettered roots
// filled the logs, and a full log stops the spouts reading, so the run
// crawled on at the pace of the expiry long after the flood (found by
// randshapes' alo-deadletter-crash, seed 21: 65 s instead of 12).
//
// Each tree's acker tells the holders (ackerExec.abandon): one message per
// tree, and a small notice per tree and holder, per dead letter, which
// are rare.
func (s *spoutExec) abandon(trees []uint64) {
	for _, tree := range trees {
		s.out.addAck(s.r.plan.ackerFor(tree), wire.AckMsg{Type: wire.AckAbandon, Tree: tree, Task: int32(s.info.id)})
	}
}

// maxAbandoned bounds the trees a root keeps for abandon: its counted
// failures are at most MaxAttempts, but worker deaths fail its attempts
// too, without counting. A tree past the bound leaves its entries to
// expire.
const maxAbandoned = 16

func (s *spoutExec) letter(stream string, id topology.MsgID, recordID uint64, values topology.Values, attempts int, why, comp string, task int) deadletter.Letter {
	return deadletter.Letter{
		Topology: s.r.plan.topo.Name, Spout: s.info.name, SpoutTask: s.info.id, Stream: stream,
		Partition: id.Partition, Offset: id.Offset, RecordID: recordID, Attempts: attempts,
		Error: why, Component: comp, Task: task, Values: values, Time: time.Now(),
	}
}

// maxLetterFails is how often the dead letters may fail for one record
// before the run gives up, rather than replay a record that can neither
// succeed nor be put aside forever.
const maxLetterFails = 3

// putLetter writes l to the dead letters and tells the spout.
func (s *spoutExec) putLetter(l deadletter.Letter) error {
	ctx, cancel := context.WithTimeout(s.w.ctx, 10*time.Second)
	defer cancel()
	if err := s.r.deadLetters.Put(ctx, l); err != nil {
		s.r.tc.deadLetterErrors.Add(1)
		s.r.warn.Error().Err(err).Str("component", s.info.name).Uint64("record", l.RecordID).Msg("cannot write a dead letter; the record is kept and retried")
		return err
	}
	s.cnt.deadLettered.Add(1)
	if s.deadAware != nil {
		s.dead = append(s.dead, deadNote{id: topology.MsgID{Partition: l.Partition, Offset: l.Offset}, why: l.Error})
	}
	return nil
}

func (s *spoutExec) drainSys() { s.sys.drain(s.onSys) }

func (s *spoutExec) onSys(m sysMsg) {
	switch {
	case m.dead != nil:
		s.onDead(*m.dead)
	case m.ckpt != nil:
		s.onCheckpoint(*m.ckpt)
	}
}

// onDead fails every tree in flight when a worker dies, instead of waiting
// for the message timeout. The acker does not know which trees touched the
// dead worker, so all of them are replayed (docs/design-notes.md). The
// crash has recovered when the last of those roots completes; a root caught
// by two crashes counts for both. A death does not count toward a root's
// MaxAttempts: it says nothing about the record.
func (s *spoutExec) onDead(n deadNotice) {
	if !s.track {
		return
	}
	now := time.Now()
	why := failure{task: -1, err: fmt.Sprintf("worker %d died", n.slot)}
	for tree, p := range s.pending {
		s.retire(tree, p, now)
		s.failTree(tree, p, why)
	}
	rec := &recovery{at: n.at}
	for _, p := range s.replayQ {
		if !p.done {
			t := p.troubled()
			t.crashes = append(t.crashes, n.crash)
			rec.remaining++
		}
	}
	if rec.remaining == 0 {
		s.r.recov.report(n.crash, n.at, now)
		return
	}
	s.recovering[n.crash] = rec
}

// recovered counts p as done for every crash that waits for it.
func (s *spoutExec) recovered(p *pendingRoot, now time.Time) {
	if p.trouble == nil {
		return
	}
	for _, c := range p.trouble.crashes {
		rec := s.recovering[c]
		if rec == nil {
			continue
		}
		if rec.remaining--; rec.remaining == 0 {
			delete(s.recovering, c)
			s.r.recov.report(c, rec.at, now)
		}
	}
	p.trouble.crashes = nil
}

func (s *spoutExec) replay(p *pendingRoot) {
	s.cnt.replayed.Add(1)
	// A replay was accepted once, so it cannot be refused now.
	_ = s.emitRoot(p.stream, p.id, p.values, true, int(p.direct), p)
}

// emitRoot sends a root record. p is the pending entry being replayed, or nil.
func (s *spoutExec) emitRoot(stream string, id topology.MsgID, values topology.Values, tracked bool, direct int, p *pendingRoot) error {
	if s.cnt.firstRoot.Load() == 0 {
		s.cnt.firstRoot.Store(time.Now().UnixNano())
	}
	so, size, err := s.check(stream, values, direct >= 0)
	if err == nil && direct >= 0 {
		s.dsts, err = directTargets(s.dsts[:0], so, direct)
		if err != nil {
			s.cnt.emitErrors.Add(1)
			err = fmt.Errorf("%w: %s (task %d) on stream %q: %w", ErrEmitRefused, s.info.name, s.info.id, stream, err)
		}
	}
	if err != nil {
		if tracked && s.track {
			// Never sent, so never replayed: the dead letters keep it.
			l := s.letter(stream, id, topology.RootID(s.info.name, stream, id), values, 0, err.Error(), s.info.name, s.info.id)
			if lerr := s.putLetter(l); lerr != nil {
				s.r.abort(fmt.Errorf("workers: a refused record of %s (offset %d) could not be dead-lettered either; fix the dead-letter destination and run again: %w (refused because: %w)", s.info.name, id.Offset, lerr, err))
			}
		}
		return err
	}
	var rec wire.Record // field by field, not a literal (see appendRecord)
	rec.Stream, rec.SrcTask, rec.Epoch, rec.Values = stream, int32(s.info.id), s.w.incarnation, values
	if p != nil {
		rec.ID = p.recordID
	} else {
		rec.ID = topology.RootID(s.info.name, stream, id)
		s.emitted++
		s.tally.emitted++
	}
	if direct < 0 {
		s.dsts = targets(s.dsts[:0], so, rec.ID, values, s.w.slot)
	}
	if !tracked || !s.track {
		for _, d := range s.dsts {
			s.out.addRecord(d, &rec, size)
		}
		if tracked {
			s.acks = append(s.acks, id) // at-most-once: acked as soon as sent, as in Storm
		}
		return nil
	}
	if len(s.dsts) == 0 {
		s.acks = append(s.acks, id) // nobody subscribes: the tree is complete
		return nil
	}
	tree := s.newTree()
	var xor uint64
	for _, d := range s.dsts {
		e := s.edge()
		xor ^= e
		// Carved from a slab, as a bolt's children's anchors are: an
		// allocation per root was a tenth of the spout's.
		if len(s.anchors) == 0 {
			s.anchors = make([]wire.Anchor, 1024)
		}
		rec.Anchors = s.anchors[:1:1]
		s.anchors = s.anchors[1:]
		rec.Anchors[0] = wire.Anchor{Tree: tree, Val: e}
		s.out.addRecord(d, &rec, size+anchorBytes)
	}
	s.out.addAck(s.r.plan.ackerFor(tree), wire.AckMsg{Type: wire.AckInit, Tree: tree, Val: xor, Task: int32(s.info.id)})
	if p == nil {
		if len(s.roots) == 0 {
			s.roots = make([]pendingRoot, rootSlab)
		}
		p = &s.roots[0]
		s.roots = s.roots[1:]
		p.id, p.recordID, p.stream, p.values = id, rec.ID, stream, values
		p.bytes, p.direct = int64(memSize(size, len(values))), int32(direct)
		if s.positions != nil && s.positions.marks != nil {
			s.positions.marks.add(p)
		}
	}
	p.attempts++
	p.start = s.clock()
	p.tree = tree
	s.pending[tree] = p
	s.pendingBytes += p.bytes
	return nil
}

// rootSlab is how many roots' pendingRoots one allocation holds: the
// allocation per root was a sixth of the objects word count allocated.
// A slab lives as long as the last of its roots is remembered, so a root
// that waits long (replays, a crash) keeps up to 2 KiB alive instead of
// its own 128 bytes; the pending bound bounds that.
const rootSlab = 16

// newTree draws the random ID of a new tree (Storm's tree ID, one per
// attempt), such that its acker (plan.ackerFor: the ID modulo the ackers)
// runs in this worker when one does: placement puts the ackers beside the
// spouts (withSpouts), and then the INIT and the completion notice of the
// tree never cross NATS.
func (s *spoutExec) newTree() uint64 {
	return treeFor(s.edge(), len(s.r.plan.ackers), s.localAckers)
}

// treeFor turns the random r into a tree ID whose acker (the ID modulo
// ackers) is one of local, chosen by r's other bits; with no local acker
// the ID is r. The IDs stay random apart from their residue, and never 0.
func treeFor(r uint64, ackers int, local []int) uint64 {
	if len(local) == 0 {
		return r
	}
	n := uint64(ackers)
	// Below 2^63, so that the multiple of n plus an index cannot wrap.
	q := (r >> 1) / n
	if q == 0 {
		q = 1 // never tree 0, as edge never draws 0
	}
	return q*n + uint64(local[q%uint64(len(local))])
}

// localAckers returns the indices into p.ackers of the ackers in slot, or
// nil when they are all there or none is (any tree ID then does as well).
func localAckers(p *plan, slot int) []int {
	var local []int
	for i, a := range p.ackers {
		if p.assign[a] == slot {
			local = append(local, i)
		}
	}
	if len(local) == len(p.ackers) {
		return nil
	}
	return local
}

// Emit implements topology.SpoutCollector.
func (s *spoutExec) Emit(id topology.MsgID, values topology.Values) error {
	return s.emitRoot(topology.DefaultStream, id, values, true, -1, nil)
}

// EmitTo implements topology.SpoutCollector.
func (s *spoutExec) EmitTo(stream string, id topology.MsgID, values topology.Values) error {
	return s.emitRoot(stream, id, values, true, -1, nil)
}

// EmitUntracked implements topology.SpoutCollector.
func (s *spoutExec) EmitUntracked(stream string, values topology.Values) error {
	return s.emitRoot(stream, topology.MsgID{Partition: -1, Offset: int64(s.emitted)}, values, false, -1, nil)
}

// EmitDirect implements topology.SpoutCollector.
func (s *spoutExec) EmitDirect(task int, stream string, id topology.MsgID, values topology.Values) error {
	if task < 0 {
		task = len(s.r.plan.tasks) // never a task: refused with the list of valid ones
	}
	return s.emitRoot(stream, id, values, true, task, nil)
}

func (s *spoutExec) stop(graceful bool) {
	defer s.publish() // what Cleanup emits
	if !graceful {
		return
	}
	s.out.flush()
	s.persistPositions(time.Time{}) // at once: nothing comes after
	s.stopping = true
	if err := s.guard("Close", s.spout.Close); err != nil {
		s.tc.Logger.Warn().Err(err).Msg("spout Close failed")
	}
}

// delayQueue is a min-heap of roots by the time their replay is due.
type delayQueue []*pendingRoot

func (q delayQueue) Len() int           { return len(q) }
func (q delayQueue) Less(i, j int) bool { return q[i].trouble.due.Before(q[j].trouble.due) }
func (q delayQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].trouble.heapIdx, q[j].trouble.heapIdx = i, j
}
func (q *delayQueue) Push(x any) {
	p := x.(*pendingRoot)
	p.troubled().heapIdx = len(*q)
	*q = append(*q, p)
}
func (q *delayQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	p.trouble.heapIdx = -1
	return p
}
