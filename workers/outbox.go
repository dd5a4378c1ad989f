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
	size int // records per batch

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
}

func newOutbox(ctx context.Context, w *Worker, src int) *outbox {
	n := len(w.r.plan.tasks)
	o := &outbox{
		ctx: ctx, w: w, src: src, size: w.r.cfg.BatchSize,
		recs: make([][]wire.Record, n), recBytes: make([]int, n),
		acks: make([][]wire.AckMsg, n), notices: make([][]wire.Notice, n),
		isDirty: make([]bool, n), lastFlush: time.Now(), seq: make([]uint64, n),
	}
	if w.r.cfg.Chaos.Enabled() && (len(w.r.cfg.ChaosComponents) == 0 || slices.Contains(w.r.cfg.ChaosComponents, w.r.plan.tasks[src].name)) {
		o.link = chaos.NewLink(w.r.cfg.Chaos, src, o.transmit, &w.r.chaosCnt)
	}
	return o
}

func (o *outbox) mark(dst int) {
	if !o.isDirty[dst] {
		o.isDirty[dst] = true
		o.dirty = append(o.dirty, dst)
	}
}

func (o *outbox) addRecord(dst int, rec wire.Record, size int) {
	o.recs[dst] = append(o.recs[dst], rec)
	o.recBytes[dst] += size
	o.mark(dst)
	if len(o.recs[dst]) >= o.size || o.recBytes[dst] >= maxBatchBytes {
		o.flushRecords(dst)
	}
}

func (o *outbox) addAck(dst int, m wire.AckMsg) {
	o.acks[dst] = append(o.acks[dst], m)
	o.mark(dst)
	if len(o.acks[dst]) >= 4*o.size {
		o.flushAcks(dst)
	}
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
	o.recs[dst] = make([]wire.Record, 0, min(o.size, 2*len(f.Records)))
	o.recBytes[dst] = 0
	o.send(dst, f)
}

func (o *outbox) flushAcks(dst int) {
	if len(o.acks[dst]) == 0 {
		return
	}
	f := &wire.Frame{Kind: wire.KindAck, Acks: o.acks[dst]}
	o.acks[dst] = make([]wire.AckMsg, 0, len(f.Acks))
	o.w.r.tc.ackMsgs.Add(int64(len(f.Acks)))
	o.send(dst, f)
}

func (o *outbox) flushNotices(dst int) {
	if len(o.notices[dst]) == 0 {
		return
	}
	f := &wire.Frame{Kind: wire.KindNotice, Notices: o.notices[dst]}
	o.notices[dst] = make([]wire.Notice, 0, len(f.Notices))
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
	o.seq[dst]++
	f.Src, f.Epoch, f.Seq = int32(o.src), o.w.incarnation, o.seq[dst]
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
				select {
				case t.data <- f:
				case <-o.ctx.Done():
					r.tc.discardedRecords.Add(n)
				}
				return
			}
			select {
			case t.ctrl <- f:
			default:
				r.tc.ctrlDropped.Add(1)
			}
			return
		}
	}
	var err error
	o.enc, err = wire.AppendFrame(o.enc[:0], f)
	if err != nil {
		// Values were checked at emit time; this is a bug, not bad input.
		r.log.Error().Err(err).Int("task", o.src).Msg("cannot encode a frame; dropping it")
		r.tc.publishErrors.Add(1)
		return
	}
	if err := o.w.nc.Publish(r.subjects[dst], o.enc); err != nil {
		r.tc.publishErrors.Add(1)
		return
	}
	if f.Kind == wire.KindData {
		r.tc.sentRecords.Add(n)
		r.tc.natsRecordsOut.Add(n)
	}
	r.tc.natsMsgsOut.Add(1)
	r.tc.natsBytesOut.Add(int64(len(o.enc)))
}
