package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/nats-io/nats.go"
)

// Checkpoints, the first mechanism of DESIGN.md section 8: the coordinator
// pauses the spouts, which stop reading their sources and wait until every
// tree they emitted has completed (replays included); each spout then
// records its position. With no tree in flight the task states form a
// consistent cut, and the coordinator asks every stateful bolt to snapshot
// (a copy in memory; transactional sinks pre-commit). The spouts resume as
// soon as every copy is made; the tasks write their blobs to the store in
// the background, and once every blob is written the coordinator writes the
// manifest, which makes the epoch complete, and tells transactional sinks
// to commit.
//
// Commands travel on the topology's control subject ("ckpt <op> <epoch>
// <generation>"),
// replies on ackflow.<topology>.ckpt as JSON, so that the same protocol
// serves workers in other processes. Epoch numbers are never reused: an
// abandoned epoch leaves a gap, so a transactional sink never sees two
// transactions with one number.

// ckptOp is a checkpoint command to the tasks.
type ckptOp uint8

const (
	ckptPause  ckptOp = iota + 1 // spouts: stop reading, drain, record the position
	ckptSnap                     // stateful bolts: snapshot
	ckptResume                   // spouts: read again
	ckptCommit                   // transactional sinks: commit
	ckptAbort                    // spouts: read again; the epoch is abandoned
)

var ckptOpNames = map[ckptOp]string{ckptPause: "pause", ckptSnap: "snap", ckptResume: "resume", ckptCommit: "commit", ckptAbort: "abort"}

func parseCkptOp(s string) (ckptOp, bool) {
	for op, name := range ckptOpNames {
		if name == s {
			return op, true
		}
	}
	return 0, false
}

// ckptCmd is one command, as a task receives it.
type ckptCmd struct {
	op    ckptOp
	epoch uint64
}

// ckptReply is what a task answers.
type ckptReply struct {
	Epoch uint64                `json:"epoch"`
	Gen   uint64                `json:"gen,omitempty"` // cluster mode: the generation
	Task  int                   `json:"task"`
	Phase string                `json:"phase"` // ready, written or failed
	Entry *checkpoint.TaskEntry `json:"entry,omitempty"`
	Err   string                `json:"err,omitempty"`
}

const (
	phaseReady     = "ready"
	phaseWritten   = "written"
	phaseCommitted = "committed" // a transactional sink committed
	phaseFailed    = "failed"
)

// coordinator takes the checkpoints of one run.
type coordinator struct {
	r       *run
	nc      *nats.Conn
	sub     *nats.Subscription
	store   checkpoint.Store
	replies chan ckptReply

	spouts, bolts, stateful, tx []int // the tasks that answer each phase

	// mu is held while a checkpoint is taken; a rollback takes it so that
	// no checkpoint runs against workers being replaced. interrupt makes a
	// checkpoint in progress give up at once.
	mu        sync.Mutex
	interrupt chan struct{}
	halted    atomic.Bool   // a rollback is waiting for mu or holds it
	held      atomic.Bool   // a slot is changing owner: periodic checkpoints wait (hold)
	next      uint64        // the next epoch number; guarded by mu
	committed atomic.Uint64 // the latest complete epoch; written under mu

	statsMu sync.Mutex
	taken   int
	aborted int
	pauses  []time.Duration
	paused  time.Duration // all pauses of completed checkpoints
	// The latest complete checkpoint, this coordinator's or the one the
	// run restored: its size, duration, pause and when it completed (zero:
	// none).
	bytes    int64
	duration time.Duration
	pause    time.Duration
	done     time.Time
}

func newCoordinator(ctx context.Context, r *run, nc *nats.Conn, store checkpoint.Store, restored uint64) (*coordinator, error) {
	c := &coordinator{r: r, nc: nc, store: store, replies: make(chan ckptReply, 4*len(r.plan.tasks)+16),
		interrupt: make(chan struct{}, 1), next: restored + 1}
	c.committed.Store(restored)
	// Epoch numbers are never reused, not even those of epochs refused or
	// left incomplete by an earlier run, so a transactional sink never sees
	// one number twice.
	epochs, err := checkpoint.ListEpochs(ctx, store, r.plan.topo.Name)
	if err != nil {
		return nil, fmt.Errorf("workers: checkpoints: %w", err)
	}
	if len(epochs) > 0 && epochs[0].Epoch >= c.next {
		c.next = epochs[0].Epoch + 1
	}
	if restored > 0 {
		// Metrics show the age of the latest checkpoint from the start, so
		// that checkpoints that keep failing after a failover are seen.
		// Without the manifest the age starts with this run's first one.
		if m, err := checkpoint.ReadManifest(ctx, store, r.plan.topo.Name, restored); err == nil {
			c.bytes, c.duration, c.pause, c.done = manifestBytes(m), m.Duration, m.Pause, m.Started.Add(m.Duration)
		}
	}
	for _, t := range r.plan.tasks {
		switch {
		case t.comp == nil || !t.stateful:
		case t.comp.IsSpout():
			c.spouts = append(c.spouts, t.id)
		default:
			c.bolts = append(c.bolts, t.id)
			if t.tx {
				c.tx = append(c.tx, t.id)
			}
		}
	}
	c.stateful = append(append([]int(nil), c.spouts...), c.bolts...)
	sub, err := nc.Subscribe(r.ckptSubject, func(m *nats.Msg) {
		var rep ckptReply
		if json.Unmarshal(m.Data, &rep) != nil {
			r.tc.badFrames.Add(1)
			return
		}
		select {
		case c.replies <- rep:
		default: // only a flood of stale replies fills it; the waiter times out
		}
	})
	if err != nil {
		return nil, fmt.Errorf("workers: checkpoints: cannot subscribe to %s: %w", r.ckptSubject, err)
	}
	c.sub = sub
	return c, nc.Flush()
}

func (c *coordinator) close() { c.sub.Unsubscribe() }

// loop takes a checkpoint every interval until stop is closed.
func (c *coordinator) loop(ctx context.Context, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			// A stop that came with the tick wins: select picks at random
			// among ready cases.
			select {
			case <-stop:
				return
			default:
			}
			if err := c.take(ctx); err != nil && ctx.Err() == nil {
				c.r.warn.Warn().Err(err).Msg("checkpoint abandoned; the next interval tries again")
			}
		}
	}
}

// take takes one checkpoint.
func (c *coordinator) take(ctx context.Context) error { return c.takeOne(ctx, false) }

// takeFinal takes the checkpoint that ends a run, finished or stopped: the
// spouts stay paused after it, so that nothing is processed, and nothing
// delivered by a transactional sink, beyond what it records.
func (c *coordinator) takeFinal(ctx context.Context) error { return c.takeOne(ctx, true) }

func (c *coordinator) takeOne(ctx context.Context, final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.halted.Load() {
		return nil // a rollback comes first; the next interval checkpoints its workers
	}
	if c.held.Load() && !final {
		return nil // a slot's new tasks could not answer yet; see hold
	}
	select {
	case <-c.interrupt: // a stale interruption from a rollback already done
	default:
	}
	e := c.next
	c.next++
	start := time.Now()
	deadline := start.Add(c.r.cfg.CheckpointTimeout)
	got := map[string]map[int]ckptReply{}
	c.send(ckptPause, e)
	if err := c.wait(ctx, e, phaseReady, c.spouts, deadline, got); err != nil {
		c.abandon(e)
		return fmt.Errorf("epoch %d: the spouts did not drain: %w", e, err)
	}
	c.send(ckptSnap, e)
	if err := c.wait(ctx, e, phaseReady, c.bolts, deadline, got); err != nil {
		c.abandon(e)
		return fmt.Errorf("epoch %d: %w", e, err)
	}
	if !final {
		c.send(ckptResume, e)
	}
	pause := time.Since(start)
	if err := c.wait(ctx, e, phaseWritten, c.stateful, time.Now().Add(c.r.cfg.CheckpointTimeout), got); err != nil {
		c.count(false, 0, 0, 0)
		return fmt.Errorf("epoch %d: %w", e, err)
	}
	m := checkpoint.Manifest{Topology: c.r.plan.topo.Name, Fingerprint: c.r.plan.fingerprint(), Epoch: e, Started: start, Pause: pause}
	var size int64
	for _, rep := range got[phaseWritten] {
		m.Tasks = append(m.Tasks, *rep.Entry)
		size += rep.Entry.Size
	}
	sort.Slice(m.Tasks, func(i, j int) bool { return m.Tasks[i].Task < m.Tasks[j].Task })
	m.Duration = time.Since(start)
	if err := c.r.fenced(); err != nil {
		c.count(false, 0, 0, 0)
		return fmt.Errorf("epoch %d: not writing the manifest: %w", e, err)
	}
	if err := checkpoint.Commit(ctx, c.store, m, c.r.cfg.KeepCheckpoints); err != nil {
		if !errors.Is(err, checkpoint.ErrRetention) {
			c.count(false, 0, 0, 0)
			return fmt.Errorf("epoch %d: writing the manifest: %w", e, err)
		}
		// The epoch is complete; only deleting old ones failed, and the
		// next commit tries again.
		c.r.warn.Warn().Err(err).Msg("old checkpoints were not deleted")
	}
	c.committed.Store(e)
	c.send(ckptCommit, e)
	c.count(true, pause, size, m.Duration)
	if final {
		// The run stops next: the sinks must have committed first, or the
		// last epoch's output would stay pending until a resumed run.
		if err := c.wait(ctx, e, phaseCommitted, c.tx, time.Now().Add(c.r.cfg.CheckpointTimeout), got); err != nil {
			return fmt.Errorf("epoch %d: the sinks did not commit: %w", e, err)
		}
	}
	c.r.log.Debug().Uint64("epoch", e).Dur("pause", pause).Int64("bytes", size).Msg("checkpoint complete")
	return nil
}

// abandon resumes the spouts of an epoch that will not complete.
func (c *coordinator) abandon(e uint64) {
	c.send(ckptAbort, e)
	c.count(false, 0, 0, 0)
}

func (c *coordinator) count(ok bool, pause time.Duration, size int64, d time.Duration) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	if !ok {
		c.aborted++
		return
	}
	c.taken++
	c.pauses = append(c.pauses, pause)
	c.paused += pause
	c.bytes, c.duration, c.pause, c.done = size, d, pause, time.Now()
}

// manifestBytes is the size of a checkpoint's task snapshots.
func manifestBytes(m *checkpoint.Manifest) int64 {
	var n int64
	for _, t := range m.Tasks {
		n += t.Size
	}
	return n
}

func (c *coordinator) send(op ckptOp, e uint64) {
	c.nc.Publish(c.r.ctlSubject, []byte(fmt.Sprintf("ckpt %s %d %d", ckptOpNames[op], e, c.r.gen)))
	c.nc.Flush()
}

// errInterrupted is returned when a rollback, or a slot changing owner,
// interrupts a checkpoint.
var errInterrupted = errors.New("interrupted: a worker slot died")

// hold makes a checkpoint in progress give up, and the periodic ones wait
// until release: a slot is changing owner, and its new tasks can answer a
// checkpoint only once they have subscribed (a checkpoint that asked
// before would keep the spouts paused until it timed out).
func (c *coordinator) hold() {
	c.held.Store(true)
	select {
	case c.interrupt <- struct{}{}:
	default:
	}
}

// release lets the periodic checkpoints go on after hold.
func (c *coordinator) release() { c.held.Store(false) }

// wait collects replies of epoch e until every task in want has answered
// phase. A failed reply, the deadline or an interruption end it with an
// error.
func (c *coordinator) wait(ctx context.Context, e uint64, phase string, want []int, deadline time.Time, got map[string]map[int]ckptReply) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		missing := 0
		for _, t := range want {
			if _, ok := got[phase][t]; !ok {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.interrupt:
			return errInterrupted
		case <-timer.C:
			return fmt.Errorf("%d of %d tasks did not answer %q within %v", missing, len(want), phase, c.r.cfg.CheckpointTimeout)
		case rep := <-c.replies:
			switch {
			case rep.Epoch != e || rep.Gen != c.r.gen:
			case rep.Phase == phaseFailed:
				return fmt.Errorf("task %d (%s): %s", rep.Task, c.r.plan.tasks[rep.Task].name, rep.Err)
			case rep.Phase == phaseWritten && rep.Entry == nil:
			default:
				if got[rep.Phase] == nil {
					got[rep.Phase] = map[int]ckptReply{}
				}
				got[rep.Phase][rep.Task] = rep
			}
		}
	}
}

// latest is the latest complete epoch. It does not wait for a checkpoint
// in progress.
func (c *coordinator) latest() uint64 { return c.committed.Load() }

// CheckpointSummary is what checkpoints did in a run.
type CheckpointSummary struct {
	Taken, Abandoned int
	// PauseP50 and PauseMax: how long the spouts stood still per checkpoint.
	PauseP50, PauseMax time.Duration
	// Bytes is the size of the latest complete checkpoint, Duration how long
	// it took from pause to manifest.
	Bytes    int64
	Duration time.Duration
	// Latest is the latest complete epoch; RestoredFrom the epoch the run
	// started from (0: the beginning); Rollbacks how often the run went back
	// to a checkpoint after losing state.
	Latest, RestoredFrom uint64
	Rollbacks            int
}

// pauseList returns how long the spouts stood still, per checkpoint.
func (c *coordinator) pauseList() []time.Duration {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return slices.Clone(c.pauses)
}

func (c *coordinator) summary() CheckpointSummary {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := CheckpointSummary{Taken: c.taken, Abandoned: c.aborted, Bytes: c.bytes, Duration: c.duration}
	if n := len(c.pauses); n > 0 {
		p := slices.Clone(c.pauses)
		slices.Sort(p)
		s.PauseP50, s.PauseMax = p[n/2], p[n-1]
	}
	return s
}
