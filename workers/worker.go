package workers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/wire"
	"github.com/nats-io/nats.go"
)

// Worker hosts the tasks placed on one worker slot. Each incarnation of a
// slot (a restart after a crash) is a new Worker with a higher incarnation,
// which is the fencing epoch stamped on everything it sends.
type Worker struct {
	r           *run
	slot        int
	incarnation uint64
	nc          *nats.Conn
	ctx         context.Context
	cancel      context.CancelFunc
	tasks       []*task // by task ID; nil where the task lives elsewhere
	subs        []*nats.Subscription
	execs       []executor
	wg          sync.WaitGroup

	lastBP    []atomic.Int64  // per slot: unix nanos of its last backpressure signal
	epochs    []atomic.Uint64 // per slot: newest incarnation known
	throttled atomic.Bool     // some worker is congested: spouts pause
	crashed   atomic.Bool
}

// task is one executor's plumbing: inboxes and identity.
type task struct {
	w    *Worker
	info *taskInfo
	data chan *wire.Frame // records, bounded: a full inbox blocks the sender
	ctrl chan *wire.Frame // acker messages and notices; never blocks a sender
	sys  chan deadNotice  // worker failures, for spouts
}

// deadNotice says that a worker slot died and came back as incarnation.
type deadNotice struct {
	slot        int
	incarnation uint64
	crash       int64     // crash ID, for recovery accounting
	at          time.Time // when the worker died
}

type executor interface {
	run(ctx context.Context)
	stop(graceful bool)
}

func startWorker(parent context.Context, r *run, slot int, incarnation uint64, epochs []uint64) (*Worker, error) {
	nc, err := nats.Connect(r.url,
		nats.Name(fmt.Sprintf("ackflow %s worker %d.%d", r.plan.topo.Name, slot, incarnation)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			r.log.Warn().Err(err).Int("worker", slot).Msg("NATS asynchronous error")
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("workers: worker %d cannot connect to NATS at %s: %w", slot, r.url, err)
	}
	ctx, cancel := context.WithCancel(parent)
	w := &Worker{
		r: r, slot: slot, incarnation: incarnation, nc: nc, ctx: ctx, cancel: cancel,
		tasks:  make([]*task, len(r.plan.tasks)),
		lastBP: make([]atomic.Int64, r.plan.workers),
		epochs: make([]atomic.Uint64, r.plan.workers),
	}
	for s, e := range epochs {
		w.epochs[s].Store(e)
	}
	for i := range r.plan.tasks {
		if r.plan.assign[i] != slot {
			continue
		}
		ctrlCap := 16 * r.cfg.QueueSize
		w.tasks[i] = &task{w: w, info: &r.plan.tasks[i],
			data: make(chan *wire.Frame, r.cfg.QueueSize),
			ctrl: make(chan *wire.Frame, ctrlCap),
			sys:  make(chan deadNotice, 16),
		}
	}
	fail := func(err error) (*Worker, error) {
		cancel()
		nc.Close()
		return nil, err
	}
	if _, err := nc.Subscribe(r.ctlSubject, w.onControl); err != nil {
		return fail(fmt.Errorf("workers: worker %d cannot subscribe to %s: %w", slot, r.ctlSubject, err))
	}
	var execs []executor
	for i, t := range w.tasks {
		if t == nil {
			continue
		}
		sub, err := nc.Subscribe(r.subjects[i], func(m *nats.Msg) { w.onFrame(t, m) })
		if err != nil {
			return fail(fmt.Errorf("workers: worker %d cannot subscribe to %s: %w", slot, r.subjects[i], err))
		}
		// Flow control is ackflow's job (spout pending bounds and
		// backpressure), so the client must never drop on its own.
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return fail(err)
		}
		w.subs = append(w.subs, sub)
		e, err := newExecutor(ctx, t)
		if err != nil {
			return fail(err)
		}
		execs = append(execs, e)
	}
	// Subscriptions must be live at the server before anyone is told this
	// worker exists.
	if err := nc.Flush(); err != nil {
		return fail(fmt.Errorf("workers: worker %d: flushing subscriptions: %w", slot, err))
	}
	w.execs = execs
	return w, nil
}

// begin starts the worker's executors. It is separate from startWorker so
// that a run can subscribe every worker before any spout emits: a record
// published to a subject nobody has subscribed yet is silently lost.
func (w *Worker) begin() {
	for _, e := range w.execs {
		w.wg.Add(1)
		go func(e executor) {
			defer w.wg.Done()
			e.run(w.ctx)
			e.stop(!w.crashed.Load())
		}(e)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.housekeeping(w.ctx)
	}()
}

// onFrame receives a frame from NATS for task t.
func (w *Worker) onFrame(t *task, m *nats.Msg) {
	r := w.r
	r.tc.natsMsgsIn.Add(1)
	r.tc.natsBytesIn.Add(int64(len(m.Data)))
	f := new(wire.Frame)
	if err := wire.DecodeFrame(m.Data, f); err != nil {
		r.tc.badFrames.Add(1)
		r.log.Debug().Err(err).Str("subject", m.Subject).Msg("dropping a frame that does not decode")
		return
	}
	wantAck := t.info.comp == nil
	switch {
	case f.Kind == wire.KindData && !wantAck:
		w.fence(f)
		select {
		case t.data <- f:
		case <-w.ctx.Done():
			r.tc.discardedRecords.Add(int64(len(f.Records)))
		}
	case f.Kind == wire.KindAck && wantAck, f.Kind == wire.KindNotice && !wantAck:
		select {
		case t.ctrl <- f:
		default:
			r.tc.ctrlDropped.Add(1)
		}
	default:
		r.tc.badFrames.Add(1)
		r.log.Debug().Str("subject", m.Subject).Int("kind", int(f.Kind)).Msg("dropping a frame of the wrong kind for its task")
	}
}

// fence removes records from unknown tasks or from a stale incarnation of
// their worker: a worker that was declared dead and replaced must not be
// heard from again.
func (w *Worker) fence(f *wire.Frame) {
	r := w.r
	keep := f.Records[:0]
	for _, rec := range f.Records {
		src := int(rec.SrcTask)
		if src < 0 || src >= len(r.plan.tasks) || r.plan.tasks[src].comp == nil {
			r.tc.badFrames.Add(1)
			r.tc.doneRecords.Add(1)
			continue
		}
		if rec.Epoch < w.epochs[r.plan.assign[src]].Load() {
			r.tc.fencedRecords.Add(1)
			r.tc.doneRecords.Add(1)
			continue
		}
		keep = append(keep, rec)
	}
	f.Records = keep
}

// onControl handles the topology's control subject: "bp <slot>" and
// "dead <slot> <incarnation> <crash id> <unix nanos>".
func (w *Worker) onControl(m *nats.Msg) {
	fields := strings.Fields(string(m.Data))
	if len(fields) < 2 {
		return
	}
	slot, err := strconv.Atoi(fields[1])
	if err != nil || slot < 0 || slot >= len(w.lastBP) {
		return
	}
	switch fields[0] {
	case "bp":
		w.lastBP[slot].Store(time.Now().UnixNano())
	case "dead":
		if len(fields) != 5 {
			return
		}
		inc, err1 := strconv.ParseUint(fields[2], 10, 64)
		crash, err2 := strconv.ParseInt(fields[3], 10, 64)
		at, err3 := strconv.ParseInt(fields[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		for {
			old := w.epochs[slot].Load()
			if inc <= old || w.epochs[slot].CompareAndSwap(old, inc) {
				break
			}
		}
		n := deadNotice{slot: slot, incarnation: inc, crash: crash, at: time.Unix(0, at)}
		for _, t := range w.tasks {
			if t != nil && t.info.comp != nil && t.info.comp.IsSpout() {
				select {
				case t.sys <- n:
				default:
				}
			}
		}
	}
}

// housekeeping sends heartbeats and backpressure signals.
func (w *Worker) housekeeping(ctx context.Context) {
	r := w.r
	hb := []byte(fmt.Sprintf("%d %d", w.slot, w.incarnation))
	bp := []byte(fmt.Sprintf("bp %d", w.slot))
	check := time.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	lastHB := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-check.C:
			if now.Sub(lastHB) >= r.cfg.HeartbeatEvery {
				lastHB = now
				w.nc.Publish(r.hbSubject, hb)
			}
			if w.congested() {
				w.lastBP[w.slot].Store(now.UnixNano())
				w.nc.Publish(r.ctlSubject, bp)
				r.tc.bpSignals.Add(1)
			}
			recent := now.Add(-100 * time.Millisecond).UnixNano()
			th := false
			for i := range w.lastBP {
				if w.lastBP[i].Load() > recent {
					th = true
				}
			}
			w.throttled.Store(th)
		}
	}
}

// congested reports whether a local task's inbox or NATS backlog is above
// its high-water mark.
func (w *Worker) congested() bool {
	high := w.r.cfg.QueueSize * 3 / 4
	for _, t := range w.tasks {
		if t != nil && (len(t.data) >= high || w.r.logFull[t.info.id].Load()) {
			return true
		}
	}
	for _, s := range w.subs {
		if n, _, err := s.Pending(); err == nil && n > w.r.cfg.QueueSize {
			return true
		}
	}
	return false
}

// crash kills the worker abruptly: its connection closes without draining,
// its tasks stop without cleanup and their state is dropped.
func (w *Worker) crash() {
	w.crashed.Store(true)
	w.nc.Close()
	w.cancel()
}

// shutdown stops the tasks gracefully (Cleanup and Close run) and closes
// the connection.
func (w *Worker) shutdown() {
	w.cancel()
	w.wg.Wait()
	w.nc.Close()
}
