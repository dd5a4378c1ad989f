package workers

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/ackflow/ackflow/acker"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
)

// base is what every executor shares: identity, counters, outbox, RNG.
type base struct {
	*task
	r     *run
	out   *outbox
	cc    *componentCounters
	rng   *rand.Rand
	tc    topology.TaskContext
	outs  map[string]*streamOut
	dsts  []int // scratch for targets
	ff    *frameFilter
	track bool // at-least-once: anchors and acker messages
}

func newBase(ctx context.Context, t *task) base {
	r := t.w.r
	b := base{
		task:  t,
		r:     r,
		out:   newOutbox(ctx, t.w, t.info.id),
		rng:   rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		track: r.cfg.Guarantee != AtMostOnce,
		ff:    newFrameFilter(len(r.plan.tasks)),
	}
	if t.info.comp != nil {
		b.cc = r.comps[t.info.name]
		b.outs = r.plan.outs[t.info.name]
		b.tc = topology.TaskContext{
			Topology: r.plan.topo.Name, Component: t.info.name, Task: t.info.id,
			Index: t.info.index, Parallelism: t.info.parallelism, Worker: t.w.slot,
			Logger: r.log.With().Str("component", t.info.name).Int("task", t.info.id).Logger(),
		}
	}
	return b
}

// admit filters out frames delivered twice (and from stale senders). In
// at-most-once mode a frame too old to check is dropped too.
func (b *base) admit(f *wire.Frame) bool {
	if b.ff.admit(f, !b.track) {
		return true
	}
	b.r.tc.dupFrames.Add(1)
	b.r.tc.doneRecords.Add(int64(len(f.Records)))
	return false
}

// edge returns a random non-zero edge or tree ID.
func (b *base) edge() uint64 {
	for {
		if e := b.rng.Uint64(); e != 0 {
			return e
		}
	}
}

// stream resolves an emit's stream and checks the values against its
// declaration; a mismatch is a bug in the topology, reported by panicking
// with a message that says how to fix it.
func (b *base) stream(name string, values topology.Values) *streamOut {
	so := b.outs[name]
	if so == nil {
		panic(fmt.Sprintf("ackflow: %s emits on stream %q, which it does not declare; declare it with .Stream(%q, fields...) or .Outputs(fields...)", b.info.name, name, name))
	}
	if len(values) != so.schema.Len() {
		panic(fmt.Sprintf("ackflow: %s emits %d values on stream %q, which declares %d fields %q", b.info.name, len(values), name, so.schema.Len(), so.schema.Names()))
	}
	return so
}

func newExecutor(ctx context.Context, t *task) (executor, error) {
	b := newBase(ctx, t)
	if t.info.comp == nil {
		tr, err := acker.New(acker.Config{Timeout: b.r.cfg.MessageTimeout, Buckets: 3})
		if err != nil {
			return nil, err
		}
		return &ackerExec{base: b, tracker: tr}, nil
	}
	if t.info.comp.IsSpout() {
		return newSpoutExec(b), nil
	}
	return newBoltExec(b), nil
}

// drainFrames hands every frame already waiting in ch to fn without blocking.
func drainFrames(ch chan *wire.Frame, fn func(*wire.Frame)) {
	for {
		select {
		case f := <-ch:
			fn(f)
		default:
			return
		}
	}
}
