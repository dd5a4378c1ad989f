package workers

import (
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
// is needed: other guarantees (their trees replay, or checkpoints restore
// the position), no positions bucket, or a spout whose source cannot
// rewind (it cannot read a record again either).
func newSpoutPositions(s *spoutExec) *spoutPositions {
	cfg := &s.r.cfg
	src, ok := s.spout.(topology.Positioned)
	if cfg.Guarantee != AtMostOnce || cfg.positions == nil || !ok {
		return nil
	}
	s.out.gated = true
	return &spoutPositions{s: s, store: cfg.positions, src: src,
		key: cluster.SpoutPosition{Topology: s.r.plan.topo.Name, Task: s.info.id, Submitted: cfg.submitted}}
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
			s.tc.Logger.Info().Msg("at-most-once spout reads on from the position its task wrote before it sent anything after it")
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
