package workers

import (
	"context"
	"time"

	"github.com/ackflow/ackflow/acker"
	"github.com/ackflow/ackflow/wire"
)

// ackerExec runs one acker task: it feeds acker messages to a Tracker and
// sends the verdicts to the spout tasks.
type ackerExec struct {
	base
	tracker  *acker.Tracker
	verdicts []acker.Verdict
}

func (a *ackerExec) run(ctx context.Context) {
	rotate := time.NewTicker(a.tracker.RotateEvery())
	defer rotate.Stop()
	linger := time.NewTicker(a.r.cfg.Linger)
	defer linger.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.ctrl.ready:
			a.ctrl.drain(a.handle)
			a.out.flush()
		case <-rotate.C:
			a.verdicts = a.tracker.Tick(a.verdicts[:0])
			a.publish()
			a.out.flush()
		case now := <-linger.C:
			a.r.held[a.info.id].Store(int64(a.out.poll(now)))
			a.linkTick(now)
		}
	}
}

func (a *ackerExec) handle(f *wire.Frame) {
	if !a.admit(f) {
		return
	}
	if f.Kind == wire.KindLink {
		a.onLink(f)
		return
	}
	for _, m := range f.Acks {
		if m.Type == wire.AckAbandon {
			a.abandon(m.Tree, int(m.Task))
			continue
		}
		a.verdicts = a.tracker.Handle(m, a.verdicts[:0])
		a.publish()
	}
	a.r.recycle(f)
}

func (a *ackerExec) publish() {
	for _, v := range a.verdicts {
		if v.SpoutTask == acker.NoSpout {
			continue // a FAIL before its INIT: the spout hears when the INIT comes
		}
		st := int(v.SpoutTask)
		if st < 0 || st >= len(a.r.plan.tasks) || a.r.plan.tasks[st].comp == nil || !a.r.plan.tasks[st].comp.IsSpout() {
			a.r.tc.badFrames.Add(1)
			continue
		}
		n := wire.Notice{Type: v.Type, Tree: v.Tree, Task: -1}
		if v.Type == wire.NoticeFailed {
			n.Task, n.Err = v.Failer, v.Err
		}
		a.out.addNotice(st, n)
		if v.Type != wire.NoticeComplete || v.Holders == 0 {
			continue // logs are kept through failures: the replay re-emits them
		}
		// Holders is a bitmask of task IDs mod 64; a task that shares a bit
		// with a real holder gets a notice it ignores.
		for _, h := range a.r.plan.holders {
			if v.Holders&(1<<(uint(h)%64)) != 0 {
				a.out.addNotice(h, wire.Notice{Type: wire.NoticeComplete, Tree: v.Tree, Task: -1})
			}
		}
	}
}

// abandon tells the tasks that keep an output log downstream of spout
// task that its tree is over (spoutExec.abandon). The tracker forgot the
// failed tree and which tasks logged something for it, so all of them
// hear, and a task that logged nothing for it ignores the notice. It goes
// from the acker, not the spout: a receiver runs each sender's data
// frames in sequence order, and a notice frame in the spout's sequence,
// taken on the control path, left a gap that held the spout's later
// records back until their trees timed out.
func (a *ackerExec) abandon(tree uint64, task int) {
	for _, h := range a.r.plan.holdersBelow(task) {
		a.out.addNotice(h, wire.Notice{Type: wire.NoticeComplete, Tree: tree, Task: -1})
	}
}

func (a *ackerExec) stop(bool) {}
