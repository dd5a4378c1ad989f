package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	crashes  []int64 // crashes whose recovery waits for this root
	direct   int     // task index for EmitDirect, -1 otherwise
	tree     uint64  // current attempt
	done     bool    // acked (perhaps by an earlier attempt completing late)
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

// spoutExec runs one spout task and its side of the acking protocol.
type spoutExec struct {
	base
	spout      topology.Spout
	selfReplay bool

	pending      map[uint64]*pendingRoot // tree ID -> root
	pendingBytes int64
	replayQ      []*pendingRoot
	acks, fails  []topology.MsgID // delivered to the spout outside Next
	exhausted    bool
	emitted      int
	recovering   map[int64]*recovery // by crash ID
	retired      map[uint64]retiredTree
	lastScan     time.Time
}

func newSpoutExec(b base) *spoutExec {
	s := &spoutExec{base: b, spout: b.info.comp.SpoutFn(), pending: map[uint64]*pendingRoot{}, recovering: map[int64]*recovery{}, retired: map[uint64]retiredTree{}}
	if sr, ok := s.spout.(topology.SelfReplaying); ok {
		s.selfReplay = sr.ReplaysItself()
	}
	return s
}

func (s *spoutExec) run(ctx context.Context) {
	if err := s.guard("Open", func() error { return s.spout.Open(s.tc, s) }); err != nil {
		s.r.abort(err)
		return
	}
	tick := time.NewTicker(min(s.r.cfg.Linger, 10*time.Millisecond))
	defer tick.Stop()
	s.lastScan = time.Now()
	idle := 0
	for {
		drainFrames(s.ctrl, s.onNotices)
		s.drainSys()
		s.deliver()
		if ctx.Err() != nil {
			return
		}
		busy := false
		if s.canEmit() {
			if len(s.replayQ) > 0 {
				n := min(len(s.replayQ), s.r.cfg.BatchSize)
				for _, p := range s.replayQ[:n] {
					if !p.done {
						s.replay(p)
					}
				}
				s.replayQ = append(s.replayQ[:0], s.replayQ[n:]...)
				busy = true
			} else if !s.exhausted {
				before := s.emitted
				err := s.guard("Next", func() error { return s.spout.Next(ctx) })
				switch {
				case errors.Is(err, topology.ErrExhausted):
					s.exhausted = true
					s.r.exhausted[s.info.id].Store(true)
				case err != nil && ctx.Err() == nil:
					s.r.abort(err)
					return
				}
				busy = s.emitted > before
			}
		}
		s.r.pending[s.info.id].Store(int64(len(s.pending) + len(s.replayQ)))
		if busy {
			if idle++; idle&63 == 0 {
				s.housekeep(time.Now())
			}
			continue
		}
		s.out.flush()
		select {
		case <-ctx.Done():
			return
		case f := <-s.ctrl:
			s.onNotices(f)
		case n := <-s.sys:
			s.onDead(n)
		case now := <-tick.C:
			s.housekeep(now)
		}
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

func (s *spoutExec) canEmit() bool {
	if s.w.throttled.Load() {
		return false
	}
	if !s.track {
		return true
	}
	return len(s.pending) < s.r.cfg.MaxSpoutPending && s.pendingBytes < s.r.cfg.MaxPendingBytes
}

func (s *spoutExec) housekeep(now time.Time) {
	s.r.held[s.info.id].Store(int64(s.out.poll(now)))
	if s.track && now.Sub(s.lastScan) >= s.r.cfg.MessageTimeout/4 {
		s.lastScan = now
		for tree, p := range s.pending {
			if now.Sub(p.start) >= s.r.cfg.MessageTimeout {
				s.cc.timedOut.Add(1)
				s.retire(tree, p, now)
				s.failTree(tree, p)
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

// deliver calls Ack and Fail outside Next, so the spout never sees them
// re-entrantly.
func (s *spoutExec) deliver() {
	for _, id := range s.acks {
		s.spout.Ack(id)
	}
	s.acks = s.acks[:0]
	for _, id := range s.fails {
		s.spout.Fail(id)
	}
	s.fails = s.fails[:0]
}

func (s *spoutExec) onNotices(f *wire.Frame) {
	if !s.admit(f) {
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
			s.failTree(n.Tree, p)
		case wire.NoticeReset:
			p.start = now
		}
	}
}

// complete acks a root once, whichever of its attempts completed.
func (s *spoutExec) complete(p *pendingRoot, now time.Time) {
	if p.done {
		return
	}
	p.done = true
	if s.pending[p.tree] == p {
		delete(s.pending, p.tree)
		s.pendingBytes -= p.bytes
		s.cc.latency.observe(now.Sub(p.start))
	}
	s.cc.acked.Add(1)
	s.acks = append(s.acks, p.id)
	s.recovered(p, now)
}

func (s *spoutExec) failTree(tree uint64, p *pendingRoot) {
	delete(s.pending, tree)
	s.pendingBytes -= p.bytes
	s.cc.failed.Add(1)
	s.fails = append(s.fails, p.id)
	if !s.selfReplay {
		s.replayQ = append(s.replayQ, p)
	} else {
		p.done = true
		s.recovered(p, time.Now())
	}
}

func (s *spoutExec) drainSys() {
	for {
		select {
		case n := <-s.sys:
			s.onDead(n)
		default:
			return
		}
	}
}

// onDead fails every tree in flight when a worker dies, instead of waiting
// for the message timeout. The acker does not know which trees touched the
// dead worker, so all of them are replayed (docs/design-notes.md). The
// crash has recovered when the last of those roots completes; a root caught
// by two crashes counts for both.
func (s *spoutExec) onDead(n deadNotice) {
	if !s.track {
		return
	}
	now := time.Now()
	for tree, p := range s.pending {
		s.retire(tree, p, now)
		s.failTree(tree, p)
	}
	rec := &recovery{at: n.at}
	for _, p := range s.replayQ {
		if !p.done {
			p.crashes = append(p.crashes, n.crash)
			rec.remaining++
		}
	}
	if rec.remaining == 0 {
		s.r.recov.report(n.crash, now.Sub(n.at))
		return
	}
	s.recovering[n.crash] = rec
}

// recovered counts p as done for every crash that waits for it.
func (s *spoutExec) recovered(p *pendingRoot, now time.Time) {
	for _, c := range p.crashes {
		rec := s.recovering[c]
		if rec == nil {
			continue
		}
		if rec.remaining--; rec.remaining == 0 {
			delete(s.recovering, c)
			s.r.recov.report(c, now.Sub(rec.at))
		}
	}
	p.crashes = nil
}

func (s *spoutExec) replay(p *pendingRoot) {
	s.cc.replayed.Add(1)
	s.emitRoot(p.stream, p.id, p.values, true, p.direct, p)
}

// emitRoot sends a root record. p is the pending entry being replayed, or nil.
func (s *spoutExec) emitRoot(stream string, id topology.MsgID, values topology.Values, tracked bool, direct int, p *pendingRoot) {
	so := s.stream(stream, values)
	rec := wire.Record{Stream: stream, SrcTask: int32(s.info.id), Epoch: s.w.incarnation, Values: values}
	if p != nil {
		rec.ID = p.recordID
	} else {
		rec.ID = topology.RootID(s.info.name, id)
		s.emitted++
		s.cc.emitted.Add(1)
	}
	size := valuesSize(values)
	s.dsts = targets(s.dsts[:0], so, values, s.w.slot, direct, s.rng)
	if !tracked || !s.track {
		for _, d := range s.dsts {
			s.out.addRecord(d, rec, size)
		}
		if tracked {
			s.acks = append(s.acks, id) // at-most-once: acked as soon as sent, as in Storm
		}
		return
	}
	if len(s.dsts) == 0 {
		s.acks = append(s.acks, id) // nobody subscribes: the tree is complete
		return
	}
	tree := s.edge()
	var xor uint64
	for _, d := range s.dsts {
		e := s.edge()
		xor ^= e
		rec.Anchors = []wire.Anchor{{Tree: tree, Val: e}}
		s.out.addRecord(d, rec, size)
	}
	s.out.addAck(s.r.plan.ackerFor(tree), wire.AckMsg{Type: wire.AckInit, Tree: tree, Val: xor, Task: int32(s.info.id)})
	if p == nil {
		p = &pendingRoot{id: id, recordID: rec.ID, stream: stream, values: values, bytes: int64(size), direct: direct}
	}
	p.start = time.Now()
	p.tree = tree
	s.pending[tree] = p
	s.pendingBytes += p.bytes
}

// Emit implements topology.SpoutCollector.
func (s *spoutExec) Emit(id topology.MsgID, values topology.Values) {
	s.emitRoot(topology.DefaultStream, id, values, true, -1, nil)
}

// EmitTo implements topology.SpoutCollector.
func (s *spoutExec) EmitTo(stream string, id topology.MsgID, values topology.Values) {
	s.emitRoot(stream, id, values, true, -1, nil)
}

// EmitUntracked implements topology.SpoutCollector.
func (s *spoutExec) EmitUntracked(stream string, values topology.Values) {
	s.emitRoot(stream, topology.MsgID{Partition: -1, Offset: int64(s.emitted)}, values, false, -1, nil)
}

// EmitDirect implements topology.SpoutCollector.
func (s *spoutExec) EmitDirect(task int, stream string, id topology.MsgID, values topology.Values) {
	s.emitRoot(stream, id, values, true, task, nil)
}

func (s *spoutExec) stop(graceful bool) {
	if !graceful {
		return
	}
	s.out.flush()
	if err := s.spout.Close(); err != nil {
		s.tc.Logger.Warn().Err(err).Msg("spout Close failed")
	}
}
