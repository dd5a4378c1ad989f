package workers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/upstreambackup"
	"github.com/ackflow/ackflow/wire"
)

// boltExec runs one bolt task and its side of the acking protocol.
type boltExec struct {
	base
	bolt topology.Bolt
	cur  *topology.Tuple // input being executed, for unanchored child IDs
	// guarded: processRecords recovers panics, so execute needs no guard.
	guarded bool
	ticks   int64
	one     [1]*topology.Tuple
	panics  int
	inputs  [][]input         // by source task: the streams subscribed from it
	tuples  []topology.Tuple  // slab the next inputs are carved from
	spare   []*topology.Tuple // done inputs, reused for the next ones (Component.ReuseInputs)

	// Output log and dedup filter: only stateful bolts with dedup on.
	log        *upstreambackup.Log
	filter     *dedup.Filter
	logged     []upstreambackup.Output // scratch for one emit's sends
	trees      []uint64                // scratch
	now        time.Time               // of the frame being processed
	lastExpire time.Time
	slab       []wire.Anchor // slab children's anchors are carved from
	keyOut     *streamOut    // the stream taskKey is for
	taskKey    uint64        // topology.TaskKey(keyOut.key, the task's index)

	// Inputs the bolt holds after Execute returned (it acks them later),
	// and replays of them that arrived meanwhile: only a completed input is
	// a duplicate (DESIGN.md section 6), so a replay waits for its original
	// to be acked (then it is a duplicate) or failed (then it runs again).
	// Basic bolts ack in Execute and never use these. Stateful bolts only.
	held   map[uint64]*topology.Tuple
	parked map[uint64][]*topology.Tuple
	ready  []*topology.Tuple // released replays, dispatched after the current input

	// The window of the capacity gauge (with metrics): when it began and
	// the busy time then.
	winStart time.Time
	winBusy  int64

	chaos   *rand.Rand // chaos fail=: nil unless this bolt injects failures
	flusher bool       // the bolt implements topology.Flusher
	ordered []*wire.Frame
}

// input is a stream a bolt subscribes to.
type input struct {
	stream string
	schema *topology.Schema
}

func newBoltExec(b base) *boltExec {
	be := &boltExec{base: b, bolt: b.info.comp.BoltFn(), now: time.Now(), lastExpire: time.Now()}
	be.winStart, be.winBusy = be.now, b.cnt.busy.Load()
	plan := b.r.plan
	if plan.logs(b.info.id) {
		// Both configs were validated with the run's Config.
		be.log, _ = upstreambackup.New(b.r.cfg.Log)
		be.filter, _ = dedup.New(b.r.cfg.Dedup)
		be.held = map[uint64]*topology.Tuple{}
		be.parked = map[uint64][]*topology.Tuple{}
	}
	if c := b.r.cfg.Chaos; c.Fail > 0 && (len(b.r.cfg.ChaosComponents) == 0 || slices.Contains(b.r.cfg.ChaosComponents, b.info.name)) {
		be.chaos = rand.New(rand.NewPCG(c.Seed, uint64(b.info.id)*0x9e3779b97f4a7c15+2))
	}
	_, be.flusher = topology.Unwrap(be.bolt).(topology.Flusher)
	be.inputs = make([][]input, len(plan.tasks))
	for _, sub := range b.info.comp.Inputs {
		schema := plan.topo.Component(sub.Source).Streams[sub.Stream]
		for _, t := range plan.compTasks[sub.Source] {
			be.inputs[t] = append(be.inputs[t], input{stream: sub.Stream, schema: schema})
		}
	}
	return be
}

func (b *boltExec) run(ctx context.Context) {
	if err := b.prepare(); err != nil {
		b.startFailed(ctx, err)
		return
	}
	linger := time.NewTicker(b.r.cfg.Linger)
	defer linger.Stop()
	var tick <-chan time.Time
	if d := b.info.comp.TickEvery; d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		tick = t.C
	}
	defer b.publish()
	for {
		b.publish()
		select {
		case <-ctx.Done():
			return
		case f := <-b.data:
			b.onData(f)
		case <-b.ctrl.ready:
			b.ctrl.drain(b.onCtrl)
		case <-b.sys.ready:
			b.sys.drain(b.onSys)
		case <-tick:
			b.tick()
		case now := <-linger.C:
			if b.flusher {
				b.flushUser()
				b.runReady()
			}
			b.r.held[b.info.id].Store(int64(b.out.poll(now)))
			b.linkTick(now)
			b.processFrames()
			b.expire(now)
			b.window(now)
			continue
		}
		if len(b.data) == 0 {
			b.out.flush()
		}
	}
}

// startFailed ends the run when a task cannot start, unless its worker is
// being stopped (a crash while the task started is not the task's fault:
// its replacement starts again).
func (b *base) startFailed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		b.r.abort(err)
	}
}

// onData takes a frame from the data inbox: records, in each sender's
// order, and high-water marks.
func (b *boltExec) onData(f *wire.Frame) {
	if !b.admit(f) {
		return
	}
	if f.Kind == wire.KindLink {
		b.onLink(f)
		return
	}
	b.ordered = b.ff.inOrder(f, b.ordered[:0])
	b.processFrames()
}

// processFrames processes the frames in b.ordered and those a gap given
// up on released.
func (b *boltExec) processFrames() {
	b.ordered = b.ff.released(b.ordered)
	for i, f := range b.ordered {
		b.process(f)
		b.ordered[i] = nil
	}
	b.ordered = b.ordered[:0]
	if n := b.ff.droppedRecords; n > 0 {
		// Frames held from a sender that restarted: its trees were failed
		// and replayed; the records are accounted as done.
		b.ff.droppedRecords = 0
		b.r.tc.doneRecords.Add(int64(n))
	}
}

func (b *boltExec) prepare() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("workers: bolt %s task %d panicked in Prepare: %v", b.info.name, b.info.id, p)
		}
	}()
	if err := b.bolt.Prepare(b.tc, b); err != nil {
		return fmt.Errorf("workers: bolt %s task %d: Prepare: %w", b.info.name, b.info.id, err)
	}
	return b.restore()
}

// tupleSlab is how many tuples one allocation holds. A slab for a whole
// frame (512 tuples of 144 bytes) was a large object, zeroed by the
// runtime when allocated and out of cache by the time its tuples were
// written: filling in tuples was the costliest line of process. 32 tuples
// are a small object from the processor's own cache.
const tupleSlab = 32

func (b *boltExec) process(f *wire.Frame) {
	timed := b.cnt.execute != nil
	var start time.Time
	if b.log != nil || timed {
		// With metrics, a frame is timed as a whole: two clock readings
		// per frame rather than per record.
		start = time.Now()
		b.now = start
	}
	if b.filter != nil {
		// The filter's lines of the first inputs are requested at once,
		// and processRecords asks for the next prefetchAhead inputs' lines
		// each time it starts on prefetchAhead more, so that their cache
		// misses overlap instead of each input's check waiting for its
		// own (dedup.Filter.PrefetchAll).
		b.prefetch(f, 0)
	}
	for i := 0; i < len(f.Records) || len(b.ready) > 0; {
		i = b.processRecords(f, i)
	}
	// Once per frame: every task adds to this counter, and an atomic add
	// per record made the cores fight over its cache line.
	b.r.tc.doneRecords.Add(int64(len(f.Records)))
	if b.log != nil {
		b.gauges()
	}
	if timed {
		d := time.Since(start)
		b.cnt.execute.ObserveN(d, len(f.Records))
		b.cnt.busy.Add(int64(d))
	}
	b.r.recycle(f)
}

// prefetchAhead is how many inputs' dedup lines a task asks for at a
// time, between 8 and 15 inputs ahead of their checks. Until round twelve
// a task prefetched every input of a frame before the first check: 1,536
// lines for a full frame, more than the core can have in flight or its
// first-level cache hold, and on an AMD EPYC host a check after that cost
// more than one without any prefetch (BenchmarkCheckNewPrefetched in
// package dedup: 59-63 ns a check, 63-68 without, 53-56 eight ahead).
// Until round nineteen each input's line was asked for on its own, 8
// inputs ahead; the call per input cost about what a batch saves.
const prefetchAhead = 8

// prefetch asks for the dedup lines of the tracked inputs among the
// prefetchAhead records of f from i on.
func (b *boltExec) prefetch(f *wire.Frame, i int) {
	var ids [prefetchAhead]uint64
	n := 0
	for j := i; j < min(i+prefetchAhead, len(f.Records)); j++ {
		if rec := &f.Records[j]; len(rec.Anchors) > 0 {
			ids[n] = rec.ID
			n++
		}
	}
	if n > 0 {
		b.filter.PrefetchAll(ids[:n])
	}
}

// processRecords dispatches the records of f from i on, and returns the
// index of the first record it has not dispatched: len(f.Records), or the
// one after a record whose Execute panicked (or the same record, when the
// panic came from a released replay run before it). A panic is recovered here, once per frame,
// rather than by a deferred function per Execute: in Go 1.26 a recover
// walks the stack, and a defer and a recover per record were 4% of word
// count's CPU. Execute runs unguarded meanwhile (b.guarded); the panic
// fails the input it was executing, as execute's own guard does.
func (b *boltExec) processRecords(f *wire.Frame, i int) (next int) {
	plan := b.r.plan
	next = i // records before next are dispatched
	b.guarded = true
	defer func() {
		b.guarded = false
		if b.cur == nil {
			return // no user code was running: a panic goes on up
		}
		if p := recover(); p != nil {
			t := b.cur
			b.cur = nil
			b.panicked(t, p)
		}
	}()
	b.runReady()
	for ; i < len(f.Records); i++ {
		rec := &f.Records[i]
		next = i + 1
		if b.filter != nil && i%prefetchAhead == 0 && i+prefetchAhead < len(f.Records) {
			b.prefetch(f, i+prefetchAhead)
		}
		schema := b.subscribed(rec)
		if schema == nil {
			// Only a forged or corrupt frame gets here: emits are checked.
			b.r.tc.badFrames.Add(1)
			continue
		}
		src := &plan.tasks[rec.SrcTask]
		t := b.newTuple(len(f.Records) - i)
		// Field by field into the zeroed slab: a composite literal is built
		// on the stack and copied, and the copy's 16-byte loads of 8-byte
		// stores stalled on store forwarding (6% of word count's CPU).
		// Every field is set, a reused tuple's too (see reuse); an
		// at-most-once record has no anchors.
		t.ID, t.Component, t.Stream, t.Task, t.Values, t.Schema = rec.ID, src.name, rec.Stream, int(rec.SrcTask), rec.Values, schema
		t.Tracking().Anchors = rec.Anchors
		b.dispatch(t)
		if len(b.ready) > 0 { // a call per record for an empty list was 3% of the CPU samples
			b.runReady()
		}
	}
	return next
}

// newTuple returns a tuple for an input, of which more frame records
// follow: a reused one (Component.ReuseInputs), whose acking state is reset
// and whose other fields the caller sets, or a zeroed one from a slab.
func (b *boltExec) newTuple(more int) *topology.Tuple {
	if n := len(b.spare); n > 0 {
		t := b.spare[n-1]
		b.spare = b.spare[:n-1]
		return t
	}
	if len(b.tuples) == 0 {
		// One allocation per tupleSlab records instead of per record; a
		// bolt that keeps a tuple keeps its slab alive, which is bounded.
		b.tuples = make([]topology.Tuple, min(more, tupleSlab))
	}
	t := &b.tuples[0]
	b.tuples = b.tuples[1:]
	return t
}

// reuse takes back an input of a bolt that lets its inputs be reused, once
// Execute returned with it acked or failed: a BasicBolt's always is, so such
// a task takes about one tuple for all its inputs. An input the bolt still
// holds is not taken. Only the acking state is reset here: processRecords
// sets every other field of the next input it carves from the tuple, at
// once, since a task takes spare tuples last in, first out. Clearing the
// whole tuple here (a typed clear of its pointers) was 3% of word count's
// CPU; what its values and anchors keep alive meanwhile is at most
// tupleSlab inputs' worth.
func (b *boltExec) reuse(t *topology.Tuple) {
	tr := t.Tracking()
	if !b.info.comp.InputsReused || !tr.Done || len(b.spare) >= tupleSlab {
		return
	}
	tr.AckVal, tr.Emitted, tr.Done, tr.Carrier = 0, 0, false, nil
	if tr.EmitErr != nil {
		tr.EmitErr = nil
	}
	b.spare = append(b.spare, t)
}

// capacityWindow is how far back the capacity gauge looks.
const capacityWindow = time.Second

// window updates, once per capacityWindow, the gauges metrics read that
// cost too much to keep per record: the task's capacity (the busy
// fraction of the window) and its dedup filter's fill and estimated
// false-positive rate.
func (b *boltExec) window(now time.Time) {
	if b.cnt.execute == nil || now.Sub(b.winStart) < capacityWindow {
		return
	}
	busy := b.cnt.busy.Load()
	b.cnt.capacity.Store(math.Float64bits(min(1, float64(busy-b.winBusy)/float64(now.Sub(b.winStart)))))
	b.winStart, b.winBusy = now, busy
	if b.filter != nil {
		st := b.filter.Stats()
		b.cnt.bloomFill.Store(math.Float64bits(st.FillRatio))
		b.cnt.bloomFP.Store(math.Float64bits(st.EstimatedFPRate))
	}
}

// dispatch runs one input through dedup and, unless it is a confirmed
// duplicate, user code.
func (b *boltExec) dispatch(t *topology.Tuple) {
	if b.chaos != nil && len(t.Tracking().Anchors) > 0 && b.chaos.Float64() < b.r.cfg.Chaos.Fail {
		b.injectFailure(t)
		return
	}
	tracked := b.filter != nil && len(t.Tracking().Anchors) > 0
	if tracked {
		if len(b.held) > 0 && b.held[t.ID] != nil {
			b.parked[t.ID] = append(b.parked[t.ID], t)
			b.cnt.parked.Add(1)
			return
		}
		switch b.filter.Check(t.ID, b.log.Has) {
		case dedup.Duplicate:
			b.reemit(t)
			return
		case dedup.Suspect:
			if b.log.Tombstones() > 0 && b.log.Failed(t.ID) {
				b.cnt.reexecuted.Add(1)
			} else {
				b.cnt.suspects.Add(1)
			}
		}
	}
	b.execute(t)
	if tracked && !t.Tracking().Done {
		b.held[t.ID] = t
		return
	}
	b.reuse(t)
}

// injectFailure fails t as a transient error would, before user code
// runs and before dedup sees it (chaos fail=): its tree replays.
func (b *boltExec) injectFailure(t *topology.Tuple) {
	tr := t.Tracking()
	tr.Done = true
	b.cnt.failed.Add(1)
	b.r.chaosCnt.InputsFailed.Add(1)
	for _, a := range tr.Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckFail, Tree: a.Tree, Task: int32(b.info.id), Err: "chaos: injected failure"})
	}
}

// runReady dispatches the replays released by acks and fails of held
// inputs. It runs after user code returns, never inside it.
func (b *boltExec) runReady() {
	for len(b.ready) > 0 {
		t := b.ready[0]
		b.ready = b.ready[1:]
		b.dispatch(t)
	}
}

// release ends the hold on in, if it was held, and readies its parked
// replays: after an ack they are duplicates, after a fail they run again.
func (b *boltExec) release(in *topology.Tuple) {
	if len(b.held) == 0 || b.held[in.ID] != in {
		return
	}
	delete(b.held, in.ID)
	if p := b.parked[in.ID]; len(p) > 0 {
		b.ready = append(b.ready, p...)
		delete(b.parked, in.ID)
	}
}

// reemit handles a confirmed duplicate without running user code: it sends
// the outputs logged for the input again (same record IDs, new edges in the
// input's current trees) and acks it, so a replay still reaches tasks
// downstream that missed the first copy, while this task's state changes
// once.
func (b *boltExec) reemit(t *topology.Tuple) {
	b.cnt.dupDropped.Add(1)
	outs, _ := b.log.Outputs(t.ID)
	b.one[0] = t
	for _, o := range outs {
		rec := o.Rec
		rec.Epoch = b.w.incarnation
		rec.Anchors = b.anchorChild(b.one[:])
		b.out.addRecord(int(o.Dst), &rec, recordOverhead+anchorBytes*len(rec.Anchors)+wireSize(rec.Values))
	}
	b.one[0] = nil
	b.cnt.reemitted.Add(int64(len(outs)))
	b.Ack(t)
}

// wireSize is the frame bytes of values already normalised at their emit.
func wireSize(values []any) int {
	n, _ := topology.NormalizeValues(values)
	return n
}

// gauges publishes the log's size for flow control and the end-of-run check.
func (b *boltExec) gauges() {
	n := int64(b.log.Len())
	b.r.logLen[b.info.id].Store(n)
	b.r.logFull[b.info.id].Store(b.log.Full())
	if n > b.cnt.logPeak.Load() {
		b.cnt.logPeak.Store(n)
	}
	nb := b.log.Bytes()
	b.cnt.logSize.Store(nb)
	if nb > b.cnt.logBytes.Load() {
		b.cnt.logBytes.Store(nb)
	}
}

// expire is the safety net for entries whose completion notice was lost:
// an entry untouched for ten message timeouts goes. Replays can come long
// after the first attempt (each one may be lost again), so the net is wide.
// An entry without outputs joins the ring of completed IDs (its input was
// processed and there is nothing to re-emit, so confirming a late replay
// as a duplicate loses nothing). One with outputs does not: nothing proves
// they were processed downstream, so a late replay runs user code again,
// which at-least-once allows; acking it without re-emitting would lose them.
func (b *boltExec) expire(now time.Time) {
	if b.log == nil || now.Sub(b.lastExpire) < b.r.cfg.MessageTimeout/4 {
		return
	}
	b.lastExpire = now
	n := b.log.Expire(now.Add(-logExpiry*b.r.cfg.MessageTimeout), func(input uint64, outputs int) {
		if outputs == 0 {
			b.filter.Completed(input)
		}
	})
	b.cnt.expired.Add(int64(n)) // tombstones too: their roots were neither replayed nor dead-lettered in time
	b.gauges()
}

// logExpiry, in message timeouts, is how long an untouched log entry lives.
const logExpiry = 10

// treesOf returns the trees t belongs to, in a scratch slice.
func (b *boltExec) treesOf(t *topology.Tuple) []uint64 {
	b.trees = b.trees[:0]
	for _, a := range t.Tracking().Anchors {
		b.trees = append(b.trees, a.Tree)
	}
	return b.trees
}

// subscribed returns the schema of rec's stream if this bolt subscribes to
// it and the values fit, else nil.
func (b *boltExec) subscribed(rec *wire.Record) *topology.Schema {
	src := int(rec.SrcTask)
	if src < 0 || src >= len(b.inputs) {
		return nil
	}
	for _, in := range b.inputs[src] {
		if in.stream == rec.Stream {
			if len(rec.Values) != in.schema.Len() {
				return nil
			}
			return in.schema
		}
	}
	return nil
}

func (b *boltExec) execute(t *topology.Tuple) {
	b.tally.executed++
	if b.guarded {
		// processRecords recovers a panic and fails t.
		b.cur = t
		b.bolt.Execute(t)
		b.cur = nil
		return
	}
	b.cur = t
	defer func() {
		b.cur = nil
		if p := recover(); p != nil {
			b.panicked(t, p)
		}
	}()
	b.bolt.Execute(t)
}

// panicked fails an input whose Execute panicked with p.
func (b *boltExec) panicked(t *topology.Tuple, p any) {
	b.cnt.panics.Add(1)
	if b.panics++; b.panics <= 10 {
		b.tc.Logger.Error().Interface("panic", p).Uint64("record", t.ID).Msg("Execute panicked; failing the input (logged for the first 10 panics of a task)")
	}
	b.FailWith(t, fmt.Errorf("panic in %s.Execute: %v", b.info.name, p))
}

func (b *boltExec) tick() {
	b.ticks++
	t := &topology.Tuple{
		ID:        topology.HashID(b.info.name, fmt.Sprint(b.info.index), "tick", fmt.Sprint(b.ticks)),
		Component: "__system", Stream: topology.TickStream, Task: -1,
		Schema: topology.NewSchema(),
	}
	b.execute(t)
	b.runReady()
}

// onCtrl handles notices and link frames. A completed tree proves that
// everything logged for it was processed downstream: its entries are
// trimmed, and the trimmed inputs move to the filter's exact ring, which
// still confirms a late replay of them.
func (b *boltExec) onCtrl(f *wire.Frame) {
	if !b.admit(f) {
		return
	}
	if f.Kind == wire.KindLink {
		b.onLink(f)
		return
	}
	if b.log == nil {
		b.r.recycle(f)
		return
	}
	for _, n := range f.Notices {
		if n.Type == wire.NoticeComplete {
			b.log.Complete(n.Tree, b.filter.Completed)
		}
	}
	b.r.recycle(f)
	b.gauges()
}

func (b *boltExec) emit(stream string, hasID bool, id uint64, anchors []*topology.Tuple, values topology.Values, direct int) error {
	so, size, err := b.check(stream, values, direct >= 0)
	if err == nil && direct >= 0 {
		if b.dsts, err = directTargets(b.dsts[:0], so, direct); err != nil {
			b.cnt.emitErrors.Add(1)
			err = fmt.Errorf("%w: %s (task %d) on stream %q: %w", ErrEmitRefused, b.info.name, b.info.id, stream, err)
		}
	}
	if err != nil {
		b.refused(anchors, err)
		return err
	}
	switch {
	case hasID:
	case len(anchors) > 0 && anchors[0] != nil:
		a := anchors[0].Tracking()
		id = topology.ChildID(anchors[0].ID, b.childKey(so), a.Emitted)
		a.Emitted++
	case b.cur != nil:
		c := b.cur.Tracking()
		id = topology.ChildID(b.cur.ID, b.childKey(so), c.Emitted)
		c.Emitted++
	default:
		id = b.edge()
	}
	b.tally.emitted++
	var rec wire.Record // field by field, not a literal (see appendRecord)
	rec.ID, rec.Stream, rec.SrcTask, rec.Epoch, rec.Values = id, stream, int32(b.info.id), b.w.incarnation, values
	if direct < 0 {
		b.dsts = targets(b.dsts[:0], so, id, values, b.w.slot)
	}
	logging := b.log != nil && len(anchors) > 0 && anchors[0] != nil && len(anchors[0].Tracking().Anchors) > 0
	b.logged = b.logged[:0]
	for _, d := range b.dsts {
		if logging {
			b.logged = append(b.logged, upstreambackup.Output{Dst: int32(d), Rec: rec})
		}
		rec.Anchors = nil
		if b.track {
			rec.Anchors = b.anchorChild(anchors)
		}
		b.out.addRecord(d, &rec, size+anchorBytes*len(rec.Anchors))
		if len(rec.Anchors) == 1 && len(anchors) == 1 && anchors[0] != nil {
			b.carry(anchors[0].Tracking(), d, &rec.Anchors[0])
		}
	}
	if logging {
		b.log.Append(anchors[0].ID, b.treesOf(anchors[0]), b.logged, memSize(size, len(values))*len(b.logged), b.now)
	}
	return nil
}

// childKey is the stream's part of this task's child IDs, computed once
// per stream in a row rather than per child: two of the four mixes of a
// child's ID (1.3% of the dedup word count's CPU samples).
func (b *boltExec) childKey(so *streamOut) uint64 {
	if b.keyOut != so {
		b.keyOut, b.taskKey = so, topology.TaskKey(so.key, b.info.index)
	}
	return b.taskKey
}

// refused remembers a refused emit on its anchors: acking them fails them
// with err instead, so the output that was not sent is replayed or
// dead-lettered, never silently lost.
func (b *boltExec) refused(anchors []*topology.Tuple, err error) {
	for _, a := range anchors {
		if a != nil && a.Tracking().EmitErr == nil {
			a.Tracking().EmitErr = err
		}
	}
}

// anchorChild draws one new edge per anchor for one send and returns the
// child's anchors: per tree, the XOR of the edges of its anchors in that
// tree (Storm's algorithm).
func (b *boltExec) anchorChild(anchors []*topology.Tuple) []wire.Anchor {
	if len(anchors) == 1 && anchors[0] != nil && len(anchors[0].Tracking().Anchors) == 1 {
		// The common case: one anchor in one tree, carved from a slab.
		tr := anchors[0].Tracking()
		e := b.edge()
		tr.AckVal ^= e
		if len(b.slab) == 0 {
			b.slab = make([]wire.Anchor, 1024)
		}
		out := b.slab[:1:1]
		b.slab = b.slab[1:]
		out[0] = wire.Anchor{Tree: tr.Anchors[0].Tree, Val: e}
		return out
	}
	var out []wire.Anchor
	for _, a := range anchors {
		if a == nil {
			continue
		}
		tr := a.Tracking()
		if len(tr.Anchors) == 0 {
			continue
		}
		e := b.edge()
		tr.AckVal ^= e
	next:
		for _, an := range tr.Anchors {
			for i := range out {
				if out[i].Tree == an.Tree {
					out[i].Val ^= e
					continue next
				}
			}
			out = append(out, wire.Anchor{Tree: an.Tree, Val: e})
		}
	}
	return out
}

// carry makes a, the only anchor of a child of tr's tuple just queued for
// dst, the tuple's carrier while the child waits in the outbox: the
// tuple's ACK can then ride on the child instead of going to the acker
// (see Ack).
func (b *boltExec) carry(tr *topology.Tracking, dst int, a *wire.Anchor) {
	tr.Carrier = nil
	if len(tr.Anchors) != 1 || a.Tree != tr.Anchors[0].Tree {
		return
	}
	if n := len(b.out.recs[dst]); n > 0 && b.out.holds(dst, n-1, a) {
		tr.Carrier, tr.CarrierDst, tr.CarrierIdx = a, int32(dst), int32(n-1)
	}
}

// Emit implements topology.Collector.
func (b *boltExec) Emit(anchor *topology.Tuple, values topology.Values) error {
	b.one[0] = anchor
	anchors := b.one[:]
	if anchor == nil {
		anchors = nil
	}
	err := b.emit(topology.DefaultStream, false, 0, anchors, values, -1)
	b.one[0] = nil
	return err
}

// EmitTo implements topology.Collector.
func (b *boltExec) EmitTo(stream string, anchors []*topology.Tuple, values topology.Values) error {
	return b.emit(stream, false, 0, anchors, values, -1)
}

// EmitWithID implements topology.Collector.
func (b *boltExec) EmitWithID(stream string, id uint64, anchors []*topology.Tuple, values topology.Values) error {
	return b.emit(stream, true, id, anchors, values, -1)
}

// EmitDirect implements topology.Collector.
func (b *boltExec) EmitDirect(task int, stream string, anchors []*topology.Tuple, values topology.Values) error {
	if task < 0 {
		task = len(b.r.plan.tasks) // never a task: refused with the list of valid ones
	}
	return b.emit(stream, false, 0, anchors, values, task)
}

// Ack implements topology.Collector.
func (b *boltExec) Ack(in *topology.Tuple) {
	tr := in.Tracking()
	if tr.Done {
		return
	}
	if tr.EmitErr != nil {
		b.FailWith(in, tr.EmitErr)
		return
	}
	tr.Done = true
	b.tally.acked++
	holder := int32(-1)
	switch {
	case b.log == nil || len(tr.Anchors) == 0:
	case b.log.Has(in.ID):
		// The input's outputs are logged: link the entry to this attempt's
		// trees and register, so that the completion notice trims it.
		b.log.Append(in.ID, b.treesOf(in), nil, 0, b.now)
		holder = int32(b.info.id)
	default:
		// Nothing to re-emit, so a replay of this input only needs to be
		// recognised: the filter's exact ring is enough, and no log entry,
		// holder registration or completion notice is needed. (Word count's
		// count bolt goes this way for every input.)
		if b.log.Tombstones() > 0 {
			b.log.Remove(in.ID) // it failed before: the tombstone is obsolete
		}
		b.filter.Completed(in.ID)
	}
	// carry set Carrier only for a tuple in one tree, and only an anchor
	// in that tree.
	if c := tr.Carrier; c != nil && holder < 0 && b.out.holds(int(tr.CarrierDst), int(tr.CarrierIdx), c) {
		// The ACK rides on a child still in the outbox: the acker gets
		// its value when that child is acked, one message fewer per
		// input. The child's anchor then no longer holds its own edge but
		// the input's and its other children's, so the tree still cannot
		// reach zero before the input's children are all acked: until
		// the carrier is, the input's edge is outstanding; after, each
		// other child's is.
		c.Val ^= tr.Anchors[0].Val ^ tr.AckVal
		b.tally.rides++
	} else {
		for _, a := range tr.Anchors {
			b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckAck, Tree: a.Tree, Val: a.Val ^ tr.AckVal, Task: holder})
		}
	}
	b.release(in)
}

// Fail implements topology.Collector.
func (b *boltExec) Fail(in *topology.Tuple) { b.FailWith(in, nil) }

// FailWith implements topology.Collector. A stateful bolt's log entry for
// the input becomes a tombstone: what it emitted before failing proves
// nothing, so the replay runs user code again, and the outputs it emits
// again carry the same IDs, which dedup downstream recognises.
func (b *boltExec) FailWith(in *topology.Tuple, reason error) {
	tr := in.Tracking()
	if tr.Done {
		return
	}
	tr.Done = true
	b.cnt.failed.Add(1)
	if b.log != nil && len(tr.Anchors) > 0 {
		b.log.Discard(in.ID, b.treesOf(in), b.now)
	}
	why := "failed by " + b.info.name
	if reason != nil {
		why = reason.Error()
		if !errors.Is(reason, ErrEmitRefused) {
			why = b.info.name + ": " + why
		}
	}
	for _, a := range tr.Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckFail, Tree: a.Tree, Task: int32(b.info.id), Err: why})
	}
	b.release(in)
}

// ResetTimeout implements topology.Collector.
func (b *boltExec) ResetTimeout(in *topology.Tuple) {
	for _, a := range in.Tracking().Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckReset, Tree: a.Tree, Task: -1})
	}
}

func (b *boltExec) stop(graceful bool) {
	defer b.publish() // what Cleanup emits
	if !graceful {
		return
	}
	if b.filter != nil {
		st := b.filter.Stats()
		maxFloat(&b.cnt.fillBits, st.FillRatio)
		maxFloat(&b.cnt.fpBits, st.EstimatedFPRate)
	}
	b.out.flush()
	b.stopping = true
	if err := b.cleanup(); err != nil {
		b.tc.Logger.Warn().Err(err).Msg("bolt Cleanup failed")
	}
}

// cleanup runs Cleanup, turning a panic into an error.
func (b *boltExec) cleanup() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in %s.Cleanup: %v", b.info.name, p)
		}
	}()
	return b.bolt.Cleanup()
}
