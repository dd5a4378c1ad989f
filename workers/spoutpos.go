package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
)

// spoutPositions keeps an at-most-once spout over a rewindable source
// from sending a record twice when its task starts again: on another
// worker after its own died, or in a later generation. At most once takes
// no checkpoints, and a spout task that starts again without its position
// would read its source from the beginning. So the spout writes its
// position before it sends what it read up to there, as Storm's Kafka
// spout commits offsets before it emits for at-most-once: its outbox holds
// every frame (outbox.gated) until the position after them is in the
// cluster's positions bucket, and a task that starts reads on from the
// position written last. What was read but not yet sent when a worker
// died is lost, which at most once allows; nothing is sent twice.
//
// The key is written by compare-and-set from the revision the task read
// when it started, so that a worker paused past its lease, whose task
// runs elsewhere now, fails its next write and sends nothing more (its
// held records are counted as discarded).
//
// At least once without checkpoints it keeps the same key for another
// end: a task that starts again reads on from before its oldest root not
// yet done instead of from the beginning (rootMarks); nothing is held.
type spoutPositions struct {
	s     *spoutExec
	store cluster.Positions
	src   topology.Positioned
	key   cluster.SpoutPosition // topology, task and submission; Position is set per write
	rev   uint64
	// stale: another owner of the task wrote since; failing: the last
	// write failed (the frames stay held and the next tick tries again).
	stale, failing bool
	// since is when the outbox began to hold what it holds now (zero:
	// nothing held, as far as persist has looked).
	since time.Time
	// emitted is the spout's count of roots at the position written last:
	// roots that no task subscribes to leave no frame to hold, but the
	// position must pass them too, or a task started again reads them
	// again, and one started again often enough never reaches its end.
	emitted int
	// marks, at least once, count the roots not yet done by the position
	// before them; nil at most once.
	marks *rootMarks
}

// positionHold is how many frames a spout's outbox holds before it writes
// its position and sends them, at most; short of that it writes once the
// frames have waited the linger, as a partial batch does, so that a paced
// spout, which flushes every few hundred microseconds, does not write its
// position at every flush. spoutBlockedFrames is how many it may hold
// while writes fail before it stops reading.
const (
	positionHold       = 16
	spoutBlockedFrames = 4 * positionHold
	positionTimeout    = 2 * time.Second
)

// newSpoutPositions returns the position keeper of s, or nil where none
// is needed: checkpoints (they restore the position), no positions
// bucket, or a spout whose source cannot rewind (it cannot read a record
// again either). At most once it holds what the spout read until the
// position after it is written; at least once it writes the position
// before the oldest root not yet done (rootMarks).
func newSpoutPositions(s *spoutExec) *spoutPositions {
	cfg := &s.r.cfg
	src, ok := s.spout.(topology.Positioned)
	if cfg.positions == nil || !ok || cfg.checkpointEvery() > 0 {
		return nil
	}
	p := &spoutPositions{s: s, store: cfg.positions, src: src,
		key: cluster.SpoutPosition{Topology: s.r.plan.topo.Name, Task: s.info.id, Submitted: cfg.submitted}}
	switch {
	case cfg.Guarantee == AtMostOnce:
		s.out.gated = true
	case cfg.Guarantee == AtLeastOnce && s.track && !s.selfReplay:
		// A spout that replays its failed records itself holds them
		// where the runtime cannot count them: a failed root counts as
		// done here, and a position past it would lose it.
		p.marks = &rootMarks{}
	default:
		return nil
	}
	return p
}

// start moves the source to the task's position, if this submission
// wrote one, and claims the key (writes the position again from the
// revision it read), before the spout reads anything.
func (p *spoutPositions) start(ctx context.Context) error {
	s := p.s
	for range 5 {
		got, rev, err := p.get(ctx)
		var at []byte
		switch {
		case err == nil && got.Submitted.Equal(p.key.Submitted):
			if err := s.guard("Seek", func() error { return p.src.Seek(got.Position) }); err != nil {
				return err
			}
			at = got.Position
			if p.marks != nil {
				s.tc.Logger.Info().Msg("at-least-once spout reads on from the oldest record its task had not seen fully processed")
			} else {
				s.tc.Logger.Info().Msg("at-most-once spout reads on from the position its task wrote before it sent anything after it")
			}
		case err == nil, errors.Is(err, cluster.ErrNotFound), errors.Is(err, cluster.ErrInvalidEntry):
			// Another submission's position, none, or garbage: from the
			// source's beginning.
			if errors.Is(err, cluster.ErrInvalidEntry) {
				s.tc.Logger.Warn().Err(err).Msg("the spout's position entry is not one ackflow writes; reading from the source's beginning and writing over it")
			}
			if err := s.guard("Position", func() (err error) { at, err = p.src.Position(); return err }); err != nil {
				return err
			}
		default:
			return err
		}
		if err := p.put(ctx, at, rev); !errors.Is(err, cluster.ErrConflict) {
			p.emitted = s.emitted
			if p.marks != nil {
				p.marks.start(at, s.emitted, time.Now())
			}
			return err
		}
		// Written meanwhile, by a previous owner: read it again.
	}
	return fmt.Errorf("workers: spout %s task %d: its position kept changing while it started; another worker runs it", s.info.name, s.info.id)
}

func (p *spoutPositions) get(ctx context.Context) (cluster.SpoutPosition, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, positionTimeout)
	defer cancel()
	return p.store.Get(ctx, p.key.Topology, p.key.Task)
}

func (p *spoutPositions) put(ctx context.Context, at []byte, rev uint64) error {
	ctx, cancel := context.WithTimeout(ctx, positionTimeout)
	defer cancel()
	p.key.Position = at
	next, err := p.store.Put(ctx, p.key, rev)
	if err == nil {
		p.rev = next
	}
	return err
}

// persist writes where the source stands, after every record the spout
// has emitted, and then sends the frames the outbox holds: when they are
// positionHold frames or have waited the linger, or always when now is
// zero (a graceful stop). It writes, by the same rules, when the spout
// emitted roots that left no frame (a stream nobody subscribes to). A
// write that fails keeps the frames held (a later call tries again); one
// that finds another owner's write drops them for good.
func (p *spoutPositions) persist(now time.Time) {
	s := p.s
	if p.marks != nil {
		p.advance(now)
		return
	}
	if p.stale || len(s.out.held) == 0 && s.emitted == p.emitted {
		return
	}
	if !now.IsZero() && len(s.out.held) < positionHold {
		if p.since.IsZero() {
			p.since = now
		}
		if now.Sub(p.since) < s.r.cfg.Linger {
			return
		}
	}
	var at []byte
	if err := s.guard("Position", func() (err error) { at, err = p.src.Position(); return err }); err != nil {
		s.r.abort(err)
		return
	}
	emitted := s.emitted
	// Not the run's context: a graceful stop, whose context has ended,
	// still sends what it holds.
	err := p.put(context.Background(), at, p.rev)
	switch {
	case err == nil:
		if p.failing {
			p.failing = false
			s.tc.Logger.Info().Msg("the spout's position is written again; sending what it held")
		}
		s.out.release()
		p.since, p.emitted = time.Time{}, emitted
	case errors.Is(err, cluster.ErrConflict):
		p.stale = true
		n := s.out.heldRecords()
		s.r.tc.unsentRecords.Add(int64(n))
		s.out.held = s.out.held[:0]
		p.since = time.Time{}
		s.tc.Logger.Error().Err(err).Int("records", n).Msg("another worker runs this at-most-once spout task now; this one sends nothing more (its unsent records are counted as discarded)")
	default:
		if !p.failing {
			p.failing = true
			s.r.warn.Warn().Err(err).Int("frames", len(s.out.held)).Msg("cannot write the at-most-once spout's position; holding what it read until it can (it stops reading meanwhile)")
		}
	}
}

// blocks reports whether the spout must not read now: another owner runs
// its task, or writes have failed long enough to fill the outbox.
func (p *spoutPositions) blocks() bool {
	return p.stale || p.failing && len(p.s.out.held) >= spoutBlockedFrames
}

// rootMarks keep an at-least-once spout over a rewindable source, in a
// topology without checkpoints, from reading its source again from the
// beginning when its task starts again (its worker died, or a new
// generation replaced the one it ran in): the spout writes, every
// frontierEvery, the position before the oldest root it has not seen
// done (acked, or dead-lettered), and a task that starts seeks there, as
// Storm's Kafka spout commits the offset below which every message is
// acked. What it reads again was in flight when the task stopped (those
// trees would have replayed), or done since the last write: dedup drops
// that at stateful bolts, within its window, and stateless ones run it
// again, as they run any replay, which at least once allows.
//
// The roots are counted per mark: the source's position taken between
// calls to Next, every frontierEvery while roots come (sooner just after
// the task starts: due). Every root emitted
// after a mark and before the next counts in it until it is done, and the
// position written is that of the oldest mark that still counts one.
type rootMarks struct {
	marks   []rootMark
	first   uint32    // the number of marks[0]; a root keeps its mark's number
	at      time.Time // when the newest mark was taken
	taken   int       // the marks taken since the task started
	emitted int       // the spout's roots when it was
	written []byte    // the position written last
}

// rootMark is the source's position, and how many roots emitted from
// there, before the next mark, are not done.
type rootMark struct {
	pos     []byte
	pending int
}

// frontierEvery is how often an at-least-once spout marks its source's
// position and writes the oldest mark with a root not yet done; maxMarks
// bounds the marks one root that is never done (replayed forever) keeps:
// past it the newest mark takes every root until older ones are done.
const (
	frontierEvery = 200 * time.Millisecond
	maxMarks      = 1024
	// firstMark is how soon after the task starts its first mark is
	// taken; each next one waits twice as long, up to frontierEvery.
	firstMark = 10 * time.Millisecond
)

// start begins the marks at pos, where the task starts reading, which its
// start wrote.
func (m *rootMarks) start(pos []byte, emitted int, now time.Time) {
	m.marks = append(m.marks[:0], rootMark{pos: pos})
	m.written, m.emitted, m.at, m.taken = pos, emitted, now, 0
}

// due is how long after the newest mark the next is taken. The first
// marks of a task come sooner than frontierEvery: a root's mark moves the
// frontier only once a later mark exists and the root is done, so with
// marks every frontierEvery from the start, a task that ran less than
// about two of them never wrote where it stood, and one restarted that
// often (its worker crashing every second, its slot moving away and back)
// read the same roots again at every start (randshapes' alo-crash seed
// 173 read its 122 roots 3,990 times and sometimes did not finish in 90
// s). The ramp costs a handful of writes per task start.
func (m *rootMarks) due() time.Duration {
	return min(firstMark<<min(m.taken, 8), frontierEvery) // the min on taken keeps the shift from overflowing
}

// add counts p, just emitted for the first time, in the newest mark.
func (m *rootMarks) add(p *pendingRoot) {
	last := len(m.marks) - 1
	m.marks[last].pending++
	p.mark = m.first + uint32(last)
}

// done counts p out of its mark.
func (m *rootMarks) done(p *pendingRoot) {
	if i := int(p.mark - m.first); i < len(m.marks) && m.marks[i].pending > 0 {
		m.marks[i].pending--
	}
}

// frontier drops the oldest marks whose roots are all done, but the
// newest, and returns the position of the oldest left: every root read
// before it is done.
func (m *rootMarks) frontier() []byte {
	for len(m.marks) > 1 && m.marks[0].pending == 0 {
		m.marks[0] = rootMark{}
		m.marks = m.marks[1:]
		m.first++
	}
	return m.marks[0].pos
}

// advance takes a new mark if roots came since the last and its time is
// due (at once for a zero now: a graceful stop), and writes the
// frontier if it moved. A write that fails is tried again at the next
// mark; one that finds another owner's write stops the spout (blocks):
// its task runs elsewhere now.
func (p *spoutPositions) advance(now time.Time) {
	s, m := p.s, p.marks
	if p.stale || len(m.marks) == 0 || !now.IsZero() && now.Sub(m.at) < m.due() {
		return
	}
	if now.IsZero() {
		now = time.Now()
	}
	m.at = now
	m.taken++
	if s.emitted != m.emitted && len(m.marks) < maxMarks {
		var at []byte
		if err := s.guard("Position", func() (err error) { at, err = p.src.Position(); return err }); err != nil {
			s.r.abort(err)
			return
		}
		m.marks = append(m.marks, rootMark{pos: at})
		m.emitted = s.emitted
	}
	at := m.frontier()
	if bytes.Equal(at, m.written) {
		return
	}
	err := p.put(context.Background(), at, p.rev)
	switch {
	case err == nil:
		m.written = at
		if p.failing {
			p.failing = false
			s.tc.Logger.Info().Msg("the spout's position is written again")
		}
	case errors.Is(err, cluster.ErrConflict):
		p.stale = true
		s.tc.Logger.Error().Err(err).Msg("another worker runs this at-least-once spout task now; this one reads nothing more (its trees in flight still replay until it stops)")
	default:
		if !p.failing {
			p.failing = true
			s.r.warn.Warn().Err(err).Msg("cannot write the at-least-once spout's position; a task started again would read its source again from the position written last (this one tries again)")
		}
	}
}
