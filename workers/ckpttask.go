package workers

import (
	"encoding/json"
	"fmt"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/topology"
)

// The tasks' side of checkpoints (coordinator.go) and of restoring one.

// reply answers the coordinator.
func (b *base) reply(e uint64, phase string, entry *checkpoint.TaskEntry, why string) {
	data, _ := json.Marshal(ckptReply{Epoch: e, Gen: b.r.gen, Task: b.info.id, Phase: phase, Entry: entry, Err: why})
	b.w.nc.Publish(b.r.ckptSubject, data)
}

// writeSnapshot writes a blob in the background and answers when it is
// stored: the task goes on meanwhile (DESIGN.md: copy in memory, write
// asynchronously).
func (b *base) writeSnapshot(e uint64, blob, position []byte) {
	b.w.wg.Add(1)
	go func() {
		defer b.w.wg.Done()
		entry, err := checkpoint.WriteTask(b.w.ctx, b.r.store, b.r.plan.topo.Name, e, b.info.id, b.info.name, b.info.index, blob)
		if err != nil {
			b.reply(e, phaseFailed, nil, err.Error())
			return
		}
		entry.Position = position
		b.reply(e, phaseWritten, &entry, "")
	}()
}

// spoutPause is a checkpoint a spout is paused for.
type spoutPause struct {
	epoch    uint64
	reported bool // the position is recorded
}

func (s *spoutExec) onCheckpoint(cmd ckptCmd) {
	switch cmd.op {
	case ckptPause:
		s.paused = &spoutPause{epoch: cmd.epoch}
	case ckptResume, ckptAbort:
		if s.paused != nil && s.paused.epoch == cmd.epoch {
			s.paused = nil
		}
	}
}

// checkDrained records the position once a paused spout has no tree in
// flight and no replay waiting: every root before the position has then
// completed (or gone to the dead letters).
func (s *spoutExec) checkDrained() {
	p := s.paused
	if p == nil || p.reported || len(s.pending)+len(s.replayQ)+len(s.delayed) > 0 {
		return
	}
	p.reported = true
	var pos []byte
	err := s.guard("Position", func() error {
		var err error
		pos, err = s.spout.(topology.Positioned).Position()
		return err
	})
	if err != nil {
		s.reply(p.epoch, phaseFailed, nil, err.Error())
		return
	}
	s.reply(p.epoch, phaseReady, nil, "")
	s.writeSnapshot(p.epoch, encodeSpoutSnapshot(pos), pos)
}

// restore seeks the spout back to the checkpoint the run starts from.
func (s *spoutExec) restore() error {
	snap, ok, err := s.r.restoreSnapshot(s.info.id)
	if err != nil || !ok {
		return err
	}
	return s.guard("Seek", func() error { return s.spout.(topology.Positioned).Seek(snap.position) })
}

func (b *boltExec) onSys(m sysMsg) {
	if m.ckpt == nil {
		return
	}
	switch m.ckpt.op {
	case ckptSnap:
		b.snapshot(m.ckpt.epoch)
	case ckptCommit:
		if tx, ok := topology.Unwrap(b.bolt).(topology.Transactional); ok {
			if err := b.r.fenced(); err != nil {
				// Another generation may own this sink now: its Recover
				// settles the pending transactions.
				b.r.warn.Warn().Err(err).Str("component", b.info.name).Uint64("epoch", m.ckpt.epoch).Msg("not committing")
				return
			}
			if err := b.user("Commit", func() error { return tx.Commit(m.ckpt.epoch) }); err != nil {
				// The transactions stay pending; the next Commit or Recover
				// commits them.
				b.r.warn.Error().Err(err).Str("component", b.info.name).Uint64("epoch", m.ckpt.epoch).Msg("commit failed")
				b.reply(m.ckpt.epoch, phaseFailed, nil, err.Error())
				return
			}
			b.reply(m.ckpt.epoch, phaseCommitted, nil, "")
		}
	}
}

// snapshot copies the bolt's state for checkpoint e and pre-commits a
// transactional sink.
func (b *boltExec) snapshot(e uint64) {
	b.flushUser()
	b.out.flush()
	var keyed, user []byte
	if b.tc.State != nil {
		keyed = b.tc.State.AppendSnapshot(nil)
	}
	inner := topology.Unwrap(b.bolt)
	st, hasUser := inner.(topology.Stateful)
	err := error(nil)
	if hasUser {
		err = b.user("Snapshot", func() error {
			var err error
			user, err = st.Snapshot()
			return err
		})
	}
	if tx, ok := inner.(topology.Transactional); ok && err == nil {
		err = b.user("PreCommit", func() error { return tx.PreCommit(e) })
	}
	if err != nil {
		b.reply(e, phaseFailed, nil, err.Error())
		return
	}
	b.reply(e, phaseReady, nil, "")
	b.writeSnapshot(e, encodeBoltSnapshot(keyed, user, hasUser), nil)
}

// restore puts back the state of the checkpoint the run starts from, and
// lets a transactional sink settle its pending transactions.
func (b *boltExec) restore() error {
	snap, ok, err := b.r.restoreSnapshot(b.info.id)
	if err != nil {
		return err
	}
	inner := topology.Unwrap(b.bolt)
	if ok {
		if b.tc.State != nil {
			if err := b.tc.State.Restore(snap.keyed); err != nil {
				return fmt.Errorf("workers: bolt %s task %d: %w", b.info.name, b.info.id, err)
			}
		}
		if st, isStateful := inner.(topology.Stateful); isStateful && snap.hasUser {
			if err := b.user("Restore", func() error { return st.Restore(snap.user) }); err != nil {
				return err
			}
		}
	}
	if tx, isTx := inner.(topology.Transactional); isTx {
		return b.user("Recover", func() error { return tx.Recover(b.r.restoredEpoch()) })
	}
	return nil
}

// flushUser calls a Flusher's Flush.
func (b *boltExec) flushUser() {
	if f, ok := topology.Unwrap(b.bolt).(topology.Flusher); ok {
		if err := b.user("Flush", func() error { f.Flush(); return nil }); err != nil {
			b.tc.Logger.Error().Err(err).Msg("Flush panicked")
		}
	}
}

// user runs a bolt callback, turning a panic into an error that names it.
func (b *boltExec) user(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("workers: bolt %s task %d panicked in %s: %v", b.info.name, b.info.id, what, p)
		}
	}()
	if err = fn(); err != nil {
		err = fmt.Errorf("workers: bolt %s task %d: %s: %w", b.info.name, b.info.id, what, err)
	}
	return err
}
