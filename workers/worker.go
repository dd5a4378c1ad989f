package workers

import (
	"context"
	"errors"
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

	bp       backpressure
	epochs   []atomic.Uint64 // per slot: newest incarnation known
	throttle atomic.Int32    // a pressure: the most any worker asks of the spouts
	crashed  atomic.Bool

	// recordLimit is the most bytes one record may take in a frame: the
	// server's max payload less room for the frame's header.
	recordLimit int
	// startEpochs are the incarnations of the slots that kept running when
	// this worker started; nil when every slot started with it (see
	// frameFilter.newEpoch).
	startEpochs []uint64
}

// knownEpoch returns the incarnation src's worker had when this one
// started, if it kept running; 0 if it started with this one or later, so
// that all of its frames are for this worker.
func (w *Worker) knownEpoch(src int32) uint64 {
	if w.startEpochs == nil || src < 0 || int(src) >= len(w.r.plan.assign) {
		return 0
	}
	slot := w.r.plan.assign[src]
	if slot == w.slot {
		return 0
	}
	return w.startEpochs[slot]
}

// task is one executor's plumbing: inboxes and identity.
type task struct {
	w    *Worker
	info *taskInfo
	data chan *wire.Frame // records, bounded: a full inbox blocks the sender
	ctrl *ctrlQueue       // acker messages, notices, link frames: never blocks, never drops
	sys  *mailbox[sysMsg] // worker failures (spouts) and checkpoint commands
}

// enqueue hands a frame to the task: records (and the high-water marks
// that describe them, which must not overtake them) to the bounded data
// inbox, everything else to the control queue. discarded is called when
// the task stops before taking a data frame.
func (t *task) enqueue(f *wire.Frame, ctx context.Context, discarded func()) {
	if !t.dataPath(f) {
		t.ctrl.push(f)
		return
	}
	select {
	case t.data <- f:
	case <-ctx.Done():
		discarded()
	}
}

// dataPath reports whether f travels through the data inbox: records, and
// a data sender's high-water marks and LinkStarts to a bolt (they describe
// the frames sent before and after them).
func (t *task) dataPath(f *wire.Frame) bool {
	switch f.Kind {
	case wire.KindData:
		return true
	case wire.KindLink:
		plan := t.w.r.plan
		return t.info.comp != nil && !t.info.comp.IsSpout() &&
			len(f.Links) > 0 && (f.Links[0].Type == wire.LinkHWM || f.Links[0].Type == wire.LinkStart) &&
			f.Src >= 0 && int(f.Src) < len(plan.tasks) && plan.tasks[f.Src].comp != nil
	}
	return false
}

// sysMsg is a message from a task's worker: a worker's death or a
// checkpoint command.
type sysMsg struct {
	dead *deadNotice
	ckpt *ckptCmd
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
	releaseBuffers() // after stop: counts what the task leaves unsent, returns what it no longer needs to pools
}

func startWorker(parent context.Context, r *run, slot int, incarnation uint64, epochs, known []uint64) (*Worker, error) {
	nc, err := nats.Connect(r.url, r.natsOptions(
		nats.Name(fmt.Sprintf("ackflow %s worker %d.%d", r.plan.topo.Name, slot, incarnation)),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				r.tc.slowConsumers.Add(1)
			}
			r.log.Warn().Err(err).Int("worker", slot).Msg("NATS asynchronous error")
		}),
		nats.ReconnectHandler(func(*nats.Conn) { r.tc.reconnects.Add(1) }),
	)...)
	if err != nil {
		return nil, fmt.Errorf("workers: worker %d cannot connect to NATS at %s: %w", slot, r.url, err)
	}
	ctx, cancel := context.WithCancel(parent)
	w := &Worker{
		r: r, slot: slot, incarnation: incarnation, nc: nc, ctx: ctx, cancel: cancel,
		tasks:       make([]*task, len(r.plan.tasks)),
		bp:          newBackpressure(r.plan.workers),
		epochs:      make([]atomic.Uint64, r.plan.workers),
		recordLimit: int(nc.MaxPayload()) - frameHeadroom,
	}
	for s, e := range epochs {
		w.epochs[s].Store(e)
	}
	w.startEpochs = known
	for i := range r.plan.tasks {
		if r.plan.assign[i] != slot {
			continue
		}
		w.tasks[i] = &task{w: w, info: &r.plan.tasks[i],
			data: make(chan *wire.Frame, r.cfg.QueueSize),
			ctrl: newCtrlQueue(),
			sys:  newMailbox[sysMsg](),
		}
		r.inboxes[i].Store(w.tasks[i])
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
			e.releaseBuffers()
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
	f := &wire.Frame{} // its array comes from the slab of its kind: see recordSlabs
	switch kind, _, _ := wire.PeekHeader(m.Data); kind {
	case wire.KindData:
		f.Records = recordSlabs.get(0)
	case wire.KindAck:
		f.Acks = ackSlabs.get(0)
	case wire.KindNotice:
		f.Notices = noticeSlabs.get(0)
	}
	decode := wire.DecodeFrame
	if t.info.comp != nil && t.info.comp.ZeroCopy {
		// The payload is the handler's: the client copied it out of its
		// read buffer, and nothing here changes it.
		decode = wire.DecodeFrameInPlace
	}
	if err := decode(m.Data, f); err != nil {
		r.recycle(f)
		r.tc.badFrames.Add(1)
		r.warn.Warn().Err(err).Str("subject", m.Subject).Msg("dropping a frame that does not decode")
		return
	}
	if r.gen > 0 && (f.Epoch>>incarnationBits != r.gen || w.staleSender(f)) {
		// Cluster mode: a frame of another generation (a worker that has
		// not heard of this one yet, or was paused past its lease), or of
		// an earlier owner of a slot that moved within this generation.
		// Its records belong to trees this generation does not track.
		r.tc.fencedFrames.Add(1)
		r.tc.fencedRecords.Add(int64(len(f.Records)))
		r.warn.Warn().Str("subject", m.Subject).Uint64("generation", f.Epoch>>incarnationBits).Uint64("incarnation", f.Epoch&(1<<incarnationBits-1)).Uint64("current", r.gen).Msg("dropping a frame of another generation, or of a slot's earlier owner")
		return
	}
	acker := t.info.comp == nil
	spout := !acker && t.info.comp.IsSpout()
	switch {
	case f.Kind == wire.KindData && !acker && !spout:
		w.fence(f)
		n := int64(len(f.Records))
		t.enqueue(f, w.ctx, func() { r.tc.discardedRecords.Add(n) })
	case f.Kind == wire.KindAck && acker, f.Kind == wire.KindNotice && !acker, f.Kind == wire.KindLink:
		t.enqueue(f, w.ctx, func() {})
	default:
		r.tc.badFrames.Add(1)
		r.warn.Warn().Str("subject", m.Subject).Str("kind", f.Kind.String()).Msg("dropping a frame of the wrong kind for its task")
	}
}

// staleSender reports whether f comes from an earlier incarnation of its
// sender's slot than the newest this worker knows: acks, notices and link
// frames as well as records.
func (w *Worker) staleSender(f *wire.Frame) bool {
	src := int(f.Src)
	return src >= 0 && src < len(w.r.plan.assign) && f.Epoch < w.epochs[w.r.plan.assign[src]].Load()
}

// frameHeadroom is what a frame needs beyond its records' bytes: the
// header, and the envelopes the record bound leaves out.
const frameHeadroom = 4 << 10

// fence removes records from unknown tasks or from a stale incarnation of
// their worker: a worker that was declared dead and replaced must not be
// heard from again. At most once, it also removes every record of a frame
// addressed to another owner of this worker's slot (see misaddressed).
func (w *Worker) fence(f *wire.Frame) {
	r := w.r
	if w.misaddressed(f) {
		n := int64(len(f.Records))
		r.tc.fencedRecords.Add(n)
		r.tc.doneRecords.Add(n)
		f.Records = f.Records[:0]
		return
	}
	// By index, moving a record only once one before it was dropped:
	// copying each record out and back cost a store-forwarding stall per
	// record (see appendRecord).
	n := 0
	for i := range f.Records {
		rec := &f.Records[i]
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
		if n != i {
			f.Records[n] = *rec
		}
		n++
	}
	f.Records = f.Records[:n]
}

// misaddressed reports whether an at-most-once data frame names another
// owner of this worker's slot than this one. While a slot moves, its old
// and new owner can both be subscribed for a moment (each follows the
// move when it hears of it), and both get every frame; each must run only
// the frames meant for it, or a record is processed twice. The frame's
// records are dropped and counted as fenced: a new owner drops what was
// sent to the old one, and an old owner what was sent to its successor.
// At-least-once and exactly-once keep them: a stale owner's outputs and
// acks are fenced where they arrive, and the records the new owner takes
// would otherwise wait for their trees' replay.
func (w *Worker) misaddressed(f *wire.Frame) bool {
	return w.r.cfg.Guarantee == AtMostOnce && f.DstEpoch != w.incarnation
}

// onControl handles the topology's control subject: "bp <slot>" (full
// queues), "bplog <slot>" (full output logs), "bpoff <slot>",
// "dead <slot> <incarnation> <crash id> <unix nanos> <generation>" (the
// slot moved to a new owner in that generation) and
// "ckpt <op> <epoch> <generation>".
func (w *Worker) onControl(m *nats.Msg) {
	fields := strings.Fields(string(m.Data))
	if len(fields) < 2 {
		w.badControl(m)
		return
	}
	if fields[0] == "ckpt" {
		w.onCheckpoint(fields)
		return
	}
	slot, err := strconv.Atoi(fields[1])
	if err != nil || slot < 0 || slot >= len(w.bp.queues) {
		w.badControl(m)
		return
	}
	switch fields[0] {
	case signalNames[queuesFull], signalNames[logsFull]:
		now := time.Now()
		w.bp.on(slot, now, signalled(fields[0]))
		w.throttle.Store(int32(w.bp.level(now)))
	case "bpoff":
		w.bp.off(slot)
		w.throttle.Store(int32(w.bp.level(time.Now())))
	case "dead":
		if len(fields) != 6 {
			w.badControl(m)
			return
		}
		inc, err1 := strconv.ParseUint(fields[2], 10, 64)
		crash, err2 := strconv.ParseInt(fields[3], 10, 64)
		at, err3 := strconv.ParseInt(fields[4], 10, 64)
		gen, err4 := strconv.ParseUint(fields[5], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			w.badControl(m)
			return
		}
		if gen != w.r.gen {
			return // about another generation's slot
		}
		w.raiseEpoch(slot, inc)
		n := &deadNotice{slot: slot, incarnation: inc, crash: crash, at: time.Unix(0, at)}
		for _, t := range w.tasks {
			if t != nil && t.info.comp != nil && t.info.comp.IsSpout() {
				t.sys.push(sysMsg{dead: n})
			}
		}
	default:
		w.badControl(m)
	}
}

// raiseEpoch makes epoch the newest known incarnation of slot, unless a
// newer one is known already.
func (w *Worker) raiseEpoch(slot int, epoch uint64) {
	for {
		old := w.epochs[slot].Load()
		if epoch <= old || w.epochs[slot].CompareAndSwap(old, epoch) {
			return
		}
	}
}

// badControl counts a control message that does not parse, and logs it
// (sampled: a flood of garbage costs a few lines).
func (w *Worker) badControl(m *nats.Msg) {
	w.r.tc.badFrames.Add(1)
	w.r.warn.Warn().Str("subject", m.Subject).Int("bytes", len(m.Data)).Msg("dropped a control message that does not parse")
}

// onCheckpoint hands a checkpoint command to the stateful tasks.
func (w *Worker) onCheckpoint(fields []string) {
	if len(fields) != 4 {
		w.r.tc.badFrames.Add(1)
		return
	}
	op, ok := parseCkptOp(fields[1])
	epoch, err := strconv.ParseUint(fields[2], 10, 64)
	gen, err2 := strconv.ParseUint(fields[3], 10, 64)
	if !ok || err != nil || err2 != nil {
		w.r.tc.badFrames.Add(1)
		return
	}
	if gen != w.r.gen {
		// A coordinator of another generation (a stale leader).
		w.r.tc.fencedFrames.Add(1)
		return
	}
	cmd := &ckptCmd{op: op, epoch: epoch}
	for _, t := range w.tasks {
		if t != nil && t.info.stateful {
			t.sys.push(sysMsg{ckpt: cmd})
		}
	}
}

// housekeeping sends backpressure signals. (Liveness is the node's
// membership entry, which cluster.Members renews.)
func (w *Worker) housekeeping(ctx context.Context) {
	r := w.r
	var signal [len(signalNames)][]byte
	for p, name := range signalNames {
		if name != "" {
			signal[p] = fmt.Appendf(nil, "%s %d", name, w.slot)
		}
	}
	bpoff := fmt.Appendf(nil, "bpoff %d", w.slot)
	signalling := false
	check := time.NewTicker(bpCheckEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-check.C:
			switch p := w.congestion(); {
			case p != noPressure:
				signalling = true
				w.bp.on(w.slot, now, p)
				w.nc.Publish(r.ctlSubject, signal[p])
				r.tc.bpSignals.Add(1)
			case signalling:
				// Drained: the spouts go on now, not when the last
				// signal has aged past bpHold.
				signalling = false
				w.bp.off(w.slot)
				w.nc.Publish(r.ctlSubject, bpoff)
			}
			// A signal handled between the reading and the store below
			// makes the spouts pause one check later.
			w.throttle.Store(int32(w.bp.level(now)))
		}
	}
}

const (
	// bpCheckEvery is how often a worker looks at its queues, and how
	// often a congested one repeats its signal.
	bpCheckEvery = 20 * time.Millisecond
	// bpHold is how long the spouts stay paused after a worker's last
	// signal unless it says it has drained: a worker that crashed while
	// congested, or whose release was lost, holds them no longer.
	bpHold = 100 * time.Millisecond
)

// pressure is what a congested worker asks of the spouts, in increasing
// order.
type pressure int32

const (
	noPressure pressure = iota
	// logsFull: an output log is at its bound. The spouts stop reading
	// their sources (DESIGN.md section 4) but go on replaying: a replay is
	// not a read, and only a failed tree's replay trims the entries that
	// tree left in the logs. Held back, the replays waited for those
	// entries to expire after logExpiry message timeouts, and then ran
	// the bolts' user code again for inputs their dedup had seen.
	logsFull
	// queuesFull: an inbox or a NATS backlog is above its mark. The spouts
	// pause, replays too, until the queues drain, which they do by
	// themselves.
	queuesFull
)

// signalNames are the control messages that signal each pressure
// ("<name> <slot>").
var signalNames = [...]string{logsFull: "bplog", queuesFull: "bp"}

// signalled is the pressure a control message's name stands for, or
// noPressure.
func signalled(name string) pressure {
	for p, n := range signalNames {
		if n != "" && n == name {
			return pressure(p)
		}
	}
	return noPressure
}

// backpressure is what a worker knows of the run's congested workers: when
// each last signalled full queues and full logs, 0 for none or released. A
// congested worker repeats its signal every bpCheckEvery and releases it
// ("bpoff") once its queues and logs are back under their marks, as Storm
// 2's workers report their tasks in and out of backpressure. Without the
// release the spouts stood still for bpHold after the queues had drained,
// and at-most-once word count, which only backpressure paces, ran slower
// than at-least-once.
type backpressure struct{ queues, logs []atomic.Int64 }

func newBackpressure(workers int) backpressure {
	return backpressure{queues: make([]atomic.Int64, workers), logs: make([]atomic.Int64, workers)}
}

// on records slot's signal of p; a worker signals one pressure at a time,
// the higher of what it sees.
func (b *backpressure) on(slot int, now time.Time, p pressure) {
	if p == queuesFull {
		b.queues[slot].Store(now.UnixNano())
		b.logs[slot].Store(0)
		return
	}
	b.logs[slot].Store(now.UnixNano())
	b.queues[slot].Store(0)
}

func (b *backpressure) off(slot int) {
	b.queues[slot].Store(0)
	b.logs[slot].Store(0)
}

// level is the highest pressure a worker signalled within bpHold before
// now and has not released.
func (b *backpressure) level(now time.Time) pressure {
	recent := now.Add(-bpHold).UnixNano()
	p := noPressure
	for i := range b.queues {
		switch {
		case b.queues[i].Load() > recent:
			return queuesFull
		case b.logs[i].Load() > recent:
			p = logsFull
		}
	}
	return p
}

// ctrlHighWater is the control queue length, in frames, past which a worker
// signals backpressure.
const ctrlHighWater = 1024

// congestion reports whether a local task's inbox or NATS backlog is
// above its high-water mark (queuesFull), else whether a local task's
// output log is at its bound (logsFull).
func (w *Worker) congestion() pressure {
	high := w.r.cfg.QueueSize * 3 / 4
	for _, s := range w.subs {
		if n, _, err := s.Pending(); err == nil && n > w.r.cfg.QueueSize {
			return queuesFull
		}
	}
	p := noPressure
	for _, t := range w.tasks {
		switch {
		case t == nil:
		case len(t.data) >= high || t.ctrl.len() >= ctrlHighWater:
			return queuesFull
		case w.r.logFull[t.info.id].Load():
			p = logsFull
		}
	}
	return p
}

// crash kills the worker abruptly: its connection closes without draining,
// its tasks stop without cleanup and their state is dropped.
func (w *Worker) crash() {
	w.crashed.Store(true)
	w.nc.Close()
	w.cancel()
}

// stopTasks stops the worker's tasks gracefully (their Cleanup runs) and
// waits for them; the connection stays open.
func (w *Worker) stopTasks() {
	w.cancel()
	w.wg.Wait()
}
