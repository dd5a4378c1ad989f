package workers

import (
	"context"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/upstreambackup"
	"github.com/ackflow/ackflow/wire"
)

// boltExec runs one bolt task and its side of the acking protocol.
type boltExec struct {
	base
	bolt   topology.Bolt
	cur    *topology.Tuple // input being executed, for unanchored child IDs
	ticks  int64
	one    [1]*topology.Tuple
	panics int
	inputs [][]input        // by source task: the streams subscribed from it
	tuples []topology.Tuple // slab the next inputs are carved from

	// Output log and dedup filter: only stateful bolts with dedup on.
	log        *upstreambackup.Log
	filter     *dedup.Filter
	logged     []upstreambackup.Output // scratch for one emit's sends
	trees      []uint64                // scratch
	now        time.Time               // of the frame being processed
	lastExpire time.Time
	slab       []wire.Anchor // slab children's anchors are carved from
}

// input is a stream a bolt subscribes to.
type input struct {
	stream string
	schema *topology.Schema
}

func newBoltExec(b base) *boltExec {
	be := &boltExec{base: b, bolt: b.info.comp.BoltFn(), now: time.Now(), lastExpire: time.Now()}
	plan := b.r.plan
	if plan.logs(b.info.id) {
		// Both configs were validated with the run's Config.
		be.log, _ = upstreambackup.New(b.r.cfg.Log)
		be.filter, _ = dedup.New(b.r.cfg.Dedup)
	}
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
		b.r.abort(err)
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
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-b.data:
			if b.admit(f) {
				b.process(f)
			}
		case f := <-b.ctrl:
			if b.admit(f) {
				b.onNotices(f)
			}
		case <-tick:
			b.tick()
		case now := <-linger.C:
			b.r.held[b.info.id].Store(int64(b.out.poll(now)))
			b.expire(now)
			continue
		}
		if len(b.data) == 0 {
			b.out.flush()
		}
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
	return nil
}

func (b *boltExec) process(f *wire.Frame) {
	plan := b.r.plan
	if b.log != nil {
		b.now = time.Now()
	}
	for i := range f.Records {
		rec := &f.Records[i]
		schema := b.subscribed(rec)
		if schema == nil {
			// Only a forged or corrupt frame gets here: emits are checked.
			b.r.tc.badFrames.Add(1)
			b.r.tc.doneRecords.Add(1)
			continue
		}
		src := &plan.tasks[rec.SrcTask]
		if len(b.tuples) == 0 {
			// One allocation per batch instead of per record; a bolt that
			// keeps a tuple keeps its batch's slab alive, which is bounded.
			b.tuples = make([]topology.Tuple, len(f.Records)-i)
		}
		t := &b.tuples[0]
		b.tuples = b.tuples[1:]
		*t = topology.Tuple{ID: rec.ID, Component: src.name, Stream: rec.Stream, Task: int(rec.SrcTask), Values: rec.Values, Schema: schema}
		if b.track {
			t.Tracking().Anchors = rec.Anchors
		}
		if b.filter != nil && len(t.Tracking().Anchors) > 0 {
			switch b.filter.Check(t.ID, b.log.Has) {
			case dedup.Duplicate:
				b.reemit(t)
				b.r.tc.doneRecords.Add(1)
				continue
			case dedup.Suspect:
				b.cc.suspects.Add(1)
			}
		}
		b.execute(t)
		b.r.tc.doneRecords.Add(1)
	}
	if b.log != nil {
		b.gauges()
	}
}

// reemit handles a confirmed duplicate without running user code: it sends
// the outputs logged for the input again (same record IDs, new edges in the
// input's current trees) and acks it, so a replay still reaches tasks
// downstream that missed the first copy, while this task's state changes
// once.
func (b *boltExec) reemit(t *topology.Tuple) {
	b.cc.dupDropped.Add(1)
	outs, _ := b.log.Outputs(t.ID)
	b.one[0] = t
	for _, o := range outs {
		rec := o.Rec
		rec.Epoch = b.w.incarnation
		rec.Anchors = b.anchorChild(b.one[:])
		b.out.addRecord(int(o.Dst), rec, valuesSize(rec.Values))
	}
	b.one[0] = nil
	b.cc.reemitted.Add(int64(len(outs)))
	b.Ack(t)
}

// gauges publishes the log's size for flow control and the end-of-run check.
func (b *boltExec) gauges() {
	n := int64(b.log.Len())
	b.r.logLen[b.info.id].Store(n)
	b.r.logFull[b.info.id].Store(b.log.Full())
	if n > b.cc.logPeak.Load() {
		b.cc.logPeak.Store(n)
	}
	if nb := b.log.Bytes(); nb > b.cc.logBytes.Load() {
		b.cc.logBytes.Store(nb)
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
	b.log.Expire(now.Add(-logExpiry*b.r.cfg.MessageTimeout), func(input uint64, outputs int) {
		if outputs == 0 {
			b.filter.Completed(input)
		}
		b.cc.expired.Add(1)
	})
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
	b.cc.executed.Add(1)
	b.cur = t
	defer func() {
		b.cur = nil
		if p := recover(); p != nil {
			b.cc.panics.Add(1)
			if b.panics++; b.panics <= 10 {
				b.tc.Logger.Error().Interface("panic", p).Uint64("record", t.ID).Msg("Execute panicked; failing the input (logged for the first 10 panics of a task)")
			}
			b.Fail(t)
		}
	}()
	b.bolt.Execute(t)
}

func (b *boltExec) tick() {
	b.ticks++
	t := &topology.Tuple{
		ID:        topology.HashID(b.info.name, fmt.Sprint(b.info.index), "tick", fmt.Sprint(b.ticks)),
		Component: "__system", Stream: topology.TickStream, Task: -1,
		Schema: topology.NewSchema(),
	}
	b.execute(t)
}

// onNotices trims the output log: a completed tree proves that everything
// logged for it was processed downstream. The trimmed inputs move to the
// filter's exact ring, which still confirms a late replay of them.
func (b *boltExec) onNotices(f *wire.Frame) {
	if b.log == nil {
		return
	}
	for _, n := range f.Notices {
		if n.Type == wire.NoticeComplete {
			b.log.Complete(n.Tree, b.filter.Completed)
		}
	}
	b.gauges()
}

func (b *boltExec) emit(stream string, hasID bool, id uint64, anchors []*topology.Tuple, values topology.Values, direct int) {
	so := b.stream(stream, values)
	switch {
	case hasID:
	case len(anchors) > 0 && anchors[0] != nil:
		a := anchors[0].Tracking()
		id = topology.ChildID(anchors[0].ID, so.key, a.Emitted)
		a.Emitted++
	case b.cur != nil:
		c := b.cur.Tracking()
		id = topology.ChildID(b.cur.ID, so.key, c.Emitted)
		c.Emitted++
	default:
		id = b.edge()
	}
	b.cc.emitted.Add(1)
	rec := wire.Record{ID: id, Stream: stream, SrcTask: int32(b.info.id), Epoch: b.w.incarnation, Values: values}
	size := valuesSize(values)
	b.dsts = targets(b.dsts[:0], so, values, b.w.slot, direct, b.rng)
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
		b.out.addRecord(d, rec, size)
	}
	if logging {
		b.log.Append(anchors[0].ID, b.treesOf(anchors[0]), b.logged, size*len(b.logged), b.now)
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

// Emit implements topology.Collector.
func (b *boltExec) Emit(anchor *topology.Tuple, values topology.Values) {
	b.one[0] = anchor
	anchors := b.one[:]
	if anchor == nil {
		anchors = nil
	}
	b.emit(topology.DefaultStream, false, 0, anchors, values, -1)
	b.one[0] = nil
}

// EmitTo implements topology.Collector.
func (b *boltExec) EmitTo(stream string, anchors []*topology.Tuple, values topology.Values) {
	b.emit(stream, false, 0, anchors, values, -1)
}

// EmitWithID implements topology.Collector.
func (b *boltExec) EmitWithID(stream string, id uint64, anchors []*topology.Tuple, values topology.Values) {
	b.emit(stream, true, id, anchors, values, -1)
}

// EmitDirect implements topology.Collector.
func (b *boltExec) EmitDirect(task int, stream string, anchors []*topology.Tuple, values topology.Values) {
	b.emit(stream, false, 0, anchors, values, task)
}

// Ack implements topology.Collector.
func (b *boltExec) Ack(in *topology.Tuple) {
	tr := in.Tracking()
	if tr.Done {
		return
	}
	tr.Done = true
	b.cc.acked.Add(1)
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
		b.filter.Completed(in.ID)
	}
	for _, a := range tr.Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckAck, Tree: a.Tree, Val: a.Val ^ tr.AckVal, Task: holder})
	}
}

// Fail implements topology.Collector.
func (b *boltExec) Fail(in *topology.Tuple) {
	tr := in.Tracking()
	if tr.Done {
		return
	}
	tr.Done = true
	b.cc.failed.Add(1)
	for _, a := range tr.Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckFail, Tree: a.Tree, Task: -1})
	}
}

// ResetTimeout implements topology.Collector.
func (b *boltExec) ResetTimeout(in *topology.Tuple) {
	for _, a := range in.Tracking().Anchors {
		b.out.addAck(b.r.plan.ackerFor(a.Tree), wire.AckMsg{Type: wire.AckReset, Tree: a.Tree, Task: -1})
	}
}

func (b *boltExec) stop(graceful bool) {
	if !graceful {
		return
	}
	if b.filter != nil {
		st := b.filter.Stats()
		maxFloat(&b.cc.fillBits, st.FillRatio)
		maxFloat(&b.cc.fpBits, st.EstimatedFPRate)
	}
	b.out.flush()
	if err := b.bolt.Cleanup(); err != nil {
		b.tc.Logger.Warn().Err(err).Msg("bolt Cleanup failed")
	}
}
