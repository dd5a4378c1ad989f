package workers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ackflow/ackflow/acker"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
)

// base is what every executor shares: identity, counters, outbox, RNG.
type base struct {
	*task
	r         *run
	out       *outbox
	cnt       *taskCounters
	rng       *rand.PCG // concrete, not a *rand.Rand: no interface call per edge
	tc        topology.TaskContext
	outs      map[string]*streamOut
	lastOut   *streamOut // the stream of the last emit, found without the map
	dsts      []int      // scratch for targets
	ff        *frameFilter
	track     bool // at-least-once: anchors and acker messages
	stopping  bool // Cleanup or Close runs: emits are refused (check)
	lastCheck time.Time
	tally     tally
}

// tally is what a task counted since it last published to its counters.
// The per-record figures are added up here and published once per round
// of the task's loop (publish): an atomic add per record cost a locked
// instruction each, which also waits for every store before it to reach
// the cache (2% of word count's CPU for executed alone).
type tally struct{ emitted, executed, acked, rides int64 }

// publish adds the tally to the task's counters, which the summary,
// progress, status reports and metrics read.
func (b *base) publish() {
	t := &b.tally
	if t.emitted != 0 {
		b.cnt.emitted.Add(t.emitted)
	}
	if t.executed != 0 {
		b.cnt.executed.Add(t.executed)
	}
	if t.acked != 0 {
		b.cnt.acked.Add(t.acked)
	}
	if t.rides != 0 {
		b.r.tc.ackRides.Add(t.rides)
	}
	*t = tally{}
}

func newBase(ctx context.Context, t *task) base {
	r := t.w.r
	track := r.cfg.Guarantee != AtMostOnce
	b := base{
		task:  t,
		r:     r,
		out:   newOutbox(ctx, t.w, t.info.id),
		rng:   rand.NewPCG(rand.Uint64(), rand.Uint64()),
		track: track,
		ff:    newFrameFilter(len(r.plan.tasks), t.w.incarnation, track, t.w.knownEpoch),
	}
	if t.info.comp != nil {
		b.cnt = r.counters[t.info.id]
		b.outs = r.plan.outs[t.info.name]
		b.tc = topology.TaskContext{
			Topology: r.plan.topo.Name, Component: t.info.name, Task: t.info.id,
			Index: t.info.index, Parallelism: t.info.parallelism, Worker: t.w.slot,
			Logger:          r.log.With().Str("component", t.info.name).Int("task", t.info.id).Logger(),
			ComponentTasks:  r.componentTasks,
			Guarantee:       r.cfg.Guarantee.String(),
			MessageTimeout:  r.cfg.MessageTimeout,
			CheckpointEvery: r.cfg.checkpointEvery(),
			Context:         ctx,
			NATSURL:         r.url,
			NATSOptions:     r.cfg.NATSOptions,
		}
		if t.info.comp.Keyed {
			b.tc.State = topology.NewState(r.plan.topo.KeyGroups)
		}
	}
	return b
}

// releaseBuffers returns the task's resend ring to its pool once the task has
// stopped, and counts the records it leaves unsent.
func (b *base) releaseBuffers() {
	b.r.tc.unsentRecords.Add(b.out.unsent())
	if b.out.resend != nil {
		b.out.resend.release()
	}
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

// ErrEmitRefused wraps every error an emit returns: the record was not sent.
var ErrEmitRefused = errors.New("ackflow: emit refused")

// check resolves an emit's stream and checks and normalises its values
// (topology.Values). It returns the stream and the record's bytes in a
// frame, or an error wrapping ErrEmitRefused that names the component,
// stream and field and says what to do.
func (b *base) check(name string, values topology.Values, direct bool) (*streamOut, int, error) {
	// Most components emit on one stream: a string compare (the same
	// string, usually) instead of a map lookup per record.
	so := b.lastOut
	if so == nil || so.name != name {
		so = b.outs[name]
		b.lastOut = so
	}
	var err error
	size := 0
	switch {
	case b.stopping:
		// Every task of a run or generation stops at once: a record
		// emitted now would reach no one.
		err = errors.New("the task is stopping (Cleanup or Close), and the tasks downstream stop with it; emit from Execute, Flush or a tick (TickEvery) instead")
	case so == nil:
		err = fmt.Errorf("the stream is not declared; declare it with .Stream(%q, fields...) or .Outputs(fields...)", name)
	case len(values) != so.schema.Len():
		err = fmt.Errorf("%d values for the %d declared fields %q", len(values), so.schema.Len(), so.schema.Names())
	case so.direct && !direct:
		err = errors.New("the stream is subscribed with Direct grouping; send with EmitDirect")
	case !so.direct && direct && len(so.routes) > 0:
		err = errors.New("EmitDirect on a stream whose subscribers do not use the Direct grouping; use Emit")
	default:
		size, err = topology.NormalizeValues(values)
		if err != nil {
			// Declared here, not above: errors.As takes its address, which
			// moves it to the heap, and that was an allocation per emit.
			var ve *topology.ValueError
			if errors.As(err, &ve) {
				ve.Name = so.schema.Names()[ve.Field]
			}
		} else if size+recordOverhead > b.w.recordLimit {
			err = fmt.Errorf("the record takes %d bytes, more than a frame can carry (%d, the NATS server's max_payload less headroom); split it or raise max_payload", size, b.w.recordLimit-recordOverhead)
		}
	}
	if err != nil {
		b.cnt.emitErrors.Add(1)
		err = fmt.Errorf("%w: %s (task %d) on stream %q: %w", ErrEmitRefused, b.info.name, b.info.id, name, err)
		b.r.warn.Error().Err(err).Msg("emit refused")
		return nil, 0, err
	}
	return so, size + recordOverhead, nil
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
