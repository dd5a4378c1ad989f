package workers

import (
	"context"
	"slices"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/wire"
)

// maxBatchBytes bounds one frame well under the server's max payload.
const maxBatchBytes = 1 << 20

// outbox batches one task's outgoing records, acker messages and notices per
// destination task. It is owned by the task's goroutine: no locks.
type outbox struct {
	ctx  context.Context
	w    *Worker
	src  int
	size int           // records per batch
	cnt  *taskCounters // the source task's; nil for ackers, which send no records

	recs      [][]wire.Record
	recBytes  []int
	acks      [][]wire.AckMsg
	notices   [][]wire.Notice
	dirty     []int
	isDirty   []bool
	link      *chaos.Link // nil without chaos
	enc       []byte
	lastFlush time.Time
	seq       []uint64 // frames sent per destination

	// Loss recovery (at-least-once): frames kept for resending, and the
	// destinations that still get high-water marks.
	resend     *resendBuffer // nil in at-most-once mode
	marks      marks
	failed     []failedRecord // records whose frame could not be sent, failed after the flush
	batchBytes int            // the byte bound of one frame
	// dstEpochs is, per destination, the incarnation of its slot this task
	// addressed last; starts are the LinkStart messages still to repeat
	// to destinations whose slot moved since (link.go, startFor).
	dstEpochs []uint64
	starts    []linkStart

	// gated holds back every frame, in held, until release: an
	// at-most-once spout sends what it read only once its position after
	// it is written (spoutPositions).
	gated bool
	held  []heldSend
}

// heldSend is a frame a gated outbox holds for dst.
type heldSend struct {
	dst int
	f   *wire.Frame
}

// failedRecord is a tree to fail because a frame carrying it could not be
// encoded or published.
type failedRecord struct {
	tree uint64
	err  string
}

func newOutbox(ctx context.Context, w *Worker, src int) *outbox {
	n := len(w.r.plan.tasks)
	o := &outbox{
		ctx: ctx, w: w, src: src, size: w.r.cfg.BatchSize, cnt: w.r.counters[src],
		recs: make([][]wire.Record, n), recBytes: make([]int, n),
		acks: make([][]wire.AckMsg, n), notices: make([][]wire.Notice, n),
		isDirty: make([]bool, n), lastFlush: time.Now(), seq: make([]uint64, n),
		batchBytes: min(maxBatchBytes, w.recordLimit),
	}
	if w.r.cfg.Chaos.Enabled() && (len(w.r.cfg.ChaosComponents) == 0 || slices.Contains(w.r.cfg.ChaosComponents, w.r.plan.tasks[src].name)) {
		o.link = chaos.NewLink(w.r.cfg.Chaos, src, o.transmit, &w.r.chaosCnt)
	}
	if w.r.cfg.Guarantee != AtMostOnce {
		o.resend = newResendBuffer(w.r.cfg.RetransmitBytes, w.r.cfg.Chaos.Enabled())
		o.marks = newMarks(n)
		o.dstEpochs = make([]uint64, n)
		for dst := range o.dstEpochs {
			o.dstEpochs[dst] = w.epochs[w.r.plan.assign[dst]].Load()
		}
	}
	return o
}

func (o *outbox) mark(dst int) {
	if !o.isDirty[dst] {
		o.isDirty[dst] = true
		o.dirty = append(o.dirty, dst)
	}
}

// addRecord queues rec for dst; size is its bytes in a frame. A record that
// would push the batch past the frame's byte bound goes into the next frame.
func (o *outbox) addRecord(dst int, rec *wire.Record, size int) {
	if len(o.recs[dst]) > 0 && o.recBytes[dst]+size > o.batchBytes {
		o.flushRecords(dst)
	}
	o.recs[dst] = appendRecord(o.recs[dst], rec)
	o.recBytes[dst] += size
	o.mark(dst)
	if len(o.recs[dst]) >= o.size || o.recBytes[dst] >= o.batchBytes {
		o.flushRecords(dst)
	}
}

// holds reports whether the record at idx of dst's batch, still unsent, is
// the one whose only anchor is a. A batch sent since is a fresh buffer,
// whose records are shorter or were written over with their own anchors,
// so a stale index never matches.
func (o *outbox) holds(dst, idx int, a *wire.Anchor) bool {
	recs := o.recs[dst]
	return idx < len(recs) && len(recs[idx].Anchors) == 1 && &recs[idx].Anchors[0] == a
}

// addAck queues an acker message for dst. An ACK of the same tree and
// holder as the ACK queued last folds into it: the acker XORs their values
// into the tree's either way, and the holder bit is the same, so one
// message does the work of both. Word count's count tasks take the words
// of a line one after the other and ack each, so the acker gets about one
// message per line and count task instead of one per word.
func (o *outbox) addAck(dst int, m wire.AckMsg) {
	if n := len(o.acks[dst]); n > 0 && m.Type == wire.AckAck {
		if last := &o.acks[dst][n-1]; last.Type == wire.AckAck && last.Tree == m.Tree && last.Task == m.Task {
			last.Val ^= m.Val
			return
		}
	}
	o.acks[dst] = append(o.acks[dst], wire.AckMsg{})
	last := &o.acks[dst][len(o.acks[dst])-1]
	last.Type, last.Tree, last.Val, last.Task, last.Err = m.Type, m.Tree, m.Val, m.Task, m.Err // see appendRecord
	o.mark(dst)
	if len(o.acks[dst]) >= 4*o.size {
		o.flushAcks(dst)
	}
}

// appendRecord appends a copy of rec to recs. It copies field by field into
// a zeroed slot: `append(recs, *rec)` copies through 16-byte loads of what
// the caller has just written with 8-byte stores, which the CPU cannot
// forward from its store buffer, so each copy waited for the stores before
// it to reach the cache (about 2% of word count's CPU, with the same
// pattern in the tuples and the ACKs).
func appendRecord(recs []wire.Record, rec *wire.Record) []wire.Record {
	recs = append(recs, wire.Record{})
	r := &recs[len(recs)-1]
	r.ID, r.Stream, r.SrcTask, r.Epoch, r.Anchors, r.Values = rec.ID, rec.Stream, rec.SrcTask, rec.Epoch, rec.Anchors, rec.Values
	return recs
}

func (o *outbox) addNotice(dst int, n wire.Notice) {
	o.notices[dst] = append(o.notices[dst], n)
	o.mark(dst)
	if len(o.notices[dst]) >= 4*o.size {
		o.flushNotices(dst)
	}
}

func (o *outbox) flushRecords(dst int) {
	if len(o.recs[dst]) == 0 {
		return
	}
	f := &wire.Frame{Kind: wire.KindData, Records: o.recs[dst]}
	// The frame now belongs to the receiver: start a fresh buffer.
	o.recs[dst] = recordSlabs.get(min(o.size, 2*len(f.Records)))
	o.recBytes[dst] = 0
	o.send(dst, f)
}

func (o *outbox) flushAcks(dst int) {
	if len(o.acks[dst]) == 0 {
		return
	}
	f := &wire.Frame{Kind: wire.KindAck, Acks: o.acks[dst]}
	o.acks[dst] = ackSlabs.get(len(f.Acks))
	o.w.r.tc.ackMsgs.Add(int64(len(f.Acks)))
	o.send(dst, f)
}

func (o *outbox) flushNotices(dst int) {
	if len(o.notices[dst]) == 0 {
		return
	}
	f := &wire.Frame{Kind: wire.KindNotice, Notices: o.notices[dst]}
	o.notices[dst] = noticeSlabs.get(len(f.Notices))
	o.send(dst, f)
}

// flush sends every partial batch.
func (o *outbox) flush() {
	for _, dst := range o.dirty {
		o.flushRecords(dst)
		o.flushAcks(dst)
		o.flushNotices(dst)
		o.isDirty[dst] = false
	}
	o.dirty = o.dirty[:0]
	o.lastFlush = time.Now()
	if len(o.failed) > 0 {
		o.failTrees()
	}
}

// poll flushes partial batches older than the linger and releases frames
// held by chaos. It returns how many frames chaos still holds.
func (o *outbox) poll(now time.Time) int {
	if now.Sub(o.lastFlush) >= o.w.r.cfg.Linger {
		o.flush()
	}
	if o.link == nil {
		return 0
	}
	return o.link.Poll(now)
}

func (o *outbox) send(dst int, f *wire.Frame) {
	if o.resend != nil {
		if e := o.dstEpoch(dst); e != o.dstEpochs[dst] {
			o.startFor(dst, e)
		}
	}
	o.seq[dst]++
	f.Src, f.Epoch, f.Seq, f.DstEpoch = int32(o.src), o.w.incarnation, o.seq[dst], o.dstEpoch(dst)
	if o.resend != nil {
		if o.resend.keepFrames {
			o.resend.keepFrame(dst, f)
		}
		o.marks.again(dst)
	}
	if o.gated {
		o.held = append(o.held, heldSend{dst, f})
		return
	}
	o.deliver(dst, f)
}

// release sends the frames a gated outbox holds, in the order they were
// made.
func (o *outbox) release() {
	for i, h := range o.held {
		o.deliver(h.dst, h.f)
		o.held[i] = heldSend{}
	}
	o.held = o.held[:0]
}

// heldRecords counts the records of the frames a gated outbox holds.
func (o *outbox) heldRecords() int {
	n := 0
	for _, h := range o.held {
		n += len(h.f.Records)
	}
	return n
}

// deliver hands f to chaos, if any, or to the transport.
func (o *outbox) deliver(dst int, f *wire.Frame) {
	if o.link != nil {
		o.link.Send(dst, f)
		o.w.r.held[o.src].Store(int64(o.link.Waiting()))
		return
	}
	o.transmit(dst, f)
}

// transmit hands a frame to a task of this worker, or publishes it.
func (o *outbox) transmit(dst int, f *wire.Frame) {
	r := o.w.r
	n := int64(len(f.Records))
	if r.plan.assign[dst] == o.w.slot {
		if t := o.w.tasks[dst]; t != nil {
			r.tc.localFrames.Add(1)
			if f.Kind == wire.KindData {
				r.tc.sentRecords.Add(n)
				r.tc.localRecords.Add(n)
			}
			t.enqueue(f, o.ctx, func() { r.tc.discardedRecords.Add(n) })
			return
		}
	}
	// A frame kept for resending is encoded into the resend ring, where
	// it stays: one copy fewer than encoding it elsewhere and keeping a
	// copy.
	keep := o.resend != nil && !o.resend.keepFrames && f.Seq != 0
	var now time.Time
	buf := o.enc[:0]
	if keep {
		now = time.Now()
		buf = o.resend.tail(now)
	}
	enc, err := wire.AppendFrame(buf, f)
	if err != nil {
		// Values are normalised and checked at emit, so this is a bug; the
		// records' trees fail rather than vanish.
		o.undeliverable(f, "cannot encode the frame: "+err.Error())
		return
	}
	if !keep {
		o.enc = enc
	}
	if err := o.w.nc.Publish(r.subjects[dst], enc); err != nil {
		o.undeliverable(f, "cannot publish the frame: "+err.Error())
		return
	}
	if keep {
		o.resend.keepBytes(dst, f.Seq, enc, now)
	}
	if f.Kind == wire.KindData {
		r.tc.sentRecords.Add(n)
		r.tc.natsRecordsOut.Add(n)
		if o.cnt != nil {
			o.cnt.transferred.Add(n)
		}
	}
	r.tc.natsMsgsOut.Add(1)
	r.tc.natsBytesOut.Add(int64(len(enc)))
	// Encoded and published: nothing reads the frame's items again.
	r.recycle(f)
}

// undeliverable accounts for a frame that cannot be sent: counted, logged,
// and its records' trees failed so that the spouts replay them at once.
func (o *outbox) undeliverable(f *wire.Frame, why string) {
	r := o.w.r
	r.tc.publishErrors.Add(1)
	if !o.w.crashed.Load() {
		// A crashed worker's connection is closed on purpose: its
		// frames go nowhere, and its state is restored elsewhere.
		r.warn.Error().Int("task", o.src).Str("kind", f.Kind.String()).Int("items", f.Len()).Msg(why)
	}
	// Not counted as sent, so unsent: discarded records are subtracted
	// from those sent.
	r.tc.unsentRecords.Add(int64(len(f.Records)))
	if f.Kind != wire.KindData || o.resend == nil {
		return
	}
	for _, rec := range f.Records {
		for _, a := range rec.Anchors {
			o.failed = append(o.failed, failedRecord{tree: a.Tree, err: why})
		}
	}
}

// unsent counts the records a stopped task leaves in its outbox: emitted
// into batches never flushed (a crash skips the flush), or held by chaos.
func (o *outbox) unsent() int64 {
	var n int64
	for _, recs := range o.recs {
		n += int64(len(recs))
	}
	n += int64(o.heldRecords())
	if o.link != nil {
		n += o.link.HeldRecords()
	}
	return n
}

// failTrees sends FAIL for the trees of records that could not be sent. It
// runs after a flush, never inside one, because it queues acker messages.
func (o *outbox) failTrees() {
	failed := o.failed
	o.failed = nil
	for _, fr := range failed {
		o.addAck(o.w.r.plan.ackerFor(fr.tree), wire.AckMsg{Type: wire.AckFail, Tree: fr.tree, Task: int32(o.src), Err: fr.err})
	}
}

// sendLink sends transport control messages to dst. Link frames carry no
// sequence number: they are idempotent, and a lost one is sent again.
func (o *outbox) sendLink(dst int, msgs []wire.LinkMsg) {
	f := &wire.Frame{Kind: wire.KindLink, Src: int32(o.src), Epoch: o.w.incarnation, DstEpoch: o.dstEpoch(dst), Links: slices.Clone(msgs)}
	o.deliver(dst, f)
}

// dstEpoch is the epoch of dst's owner as far as this worker knows.
func (o *outbox) dstEpoch(dst int) uint64 { return o.w.epochs[o.w.r.plan.assign[dst]].Load() }
