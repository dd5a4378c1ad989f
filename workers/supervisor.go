package workers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/nats-io/nats.go"
)

// supervisor starts the worker slots, detects dead workers, restarts them
// and tells the others. Liveness is the cluster's membership (cluster.Members)
// over an in-memory bucket: each incarnation of a slot joins as a member and
// keeps its entry alive while it runs, exactly as a worker process does in
// the KV bucket of cluster mode, and a slot whose entry expired is dead.
type supervisor struct {
	ctx     context.Context
	r       *run
	nc      *nats.Conn
	members *cluster.MemoryMembers
	mu      sync.Mutex
	live    []*Worker
	inc     []uint64
	seen    []atomic.Int64 // per slot: unix nanos when the membership last listed it

	crashes   atomic.Int64
	crashLog  []time.Time    // guarded by mu
	warned    []bool         // per slot, owned by detect
	crashedAt []atomic.Int64 // per slot: when chaos crashed it (unix nanos)
	crashID   []atomic.Int64 // per slot: ID of that crash
	stopCh    chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	graveyard sync.WaitGroup // crashed workers' goroutines
}

func newSupervisor(ctx context.Context, r *run) (*supervisor, error) {
	members, err := cluster.NewMemoryMembers(cluster.MembersConfig{HeartbeatEvery: r.cfg.HeartbeatEvery, DeadAfter: r.cfg.DeadAfter})
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	nc, err := nats.Connect(r.url, r.natsOptions(nats.Name("ackflow "+r.plan.topo.Name+" supervisor"))...)
	if err != nil {
		return nil, fmt.Errorf("workers: supervisor cannot connect to NATS at %s: %w", r.url, err)
	}
	n := r.plan.workers
	return &supervisor{ctx: ctx, r: r, nc: nc, members: members, live: make([]*Worker, n), inc: make([]uint64, n),
		seen: make([]atomic.Int64, n), crashedAt: make([]atomic.Int64, n), crashID: make([]atomic.Int64, n), warned: make([]bool, n), stopCh: make(chan struct{})}, nil
}

// memberName names incarnation inc of slot in the membership.
func memberName(slot int, inc uint64) string { return fmt.Sprintf("slot%d-%d", slot, inc) }

// startSlot starts a new incarnation of slot; begin also starts its tasks.
// known are the incarnations of the slots whose tasks keep running while
// this one starts (nil: every slot starts anew, as in a rollback).
func (s *supervisor) startSlot(slot int, begin bool, known []uint64) error {
	s.mu.Lock()
	s.inc[slot]++
	epochs := append([]uint64(nil), s.inc...)
	s.mu.Unlock()
	w, err := startWorker(s.ctx, s.r, slot, epochs[slot], epochs, known)
	if err != nil {
		return err
	}
	// The entry lives as long as the worker: a crash ends w.ctx, the
	// heartbeats stop, and the entry expires DeadAfter later.
	if err := s.members.Join(w.ctx, cluster.Member{Name: memberName(slot, epochs[slot])}); err != nil {
		w.crash()
		w.wg.Wait()
		return err
	}
	s.seen[slot].Store(time.Now().UnixNano())
	s.mu.Lock()
	s.live[slot] = w
	s.mu.Unlock()
	if begin {
		w.begin()
	}
	return nil
}

func (s *supervisor) beginAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.live {
		w.begin()
	}
}

// watch starts failure detection and the crasher when crash chaos is on.
// Without it, the workers of a local run share one process and cannot die
// on their own, so there is nothing to detect, and a false alarm under load
// would only destroy state.
func (s *supervisor) watch() {
	if every := s.r.cfg.Chaos.CrashEvery; every > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.detect()
		}()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.crasher(every)
		}()
	}
}

func (s *supervisor) detect() {
	t := time.NewTicker(s.r.cfg.HeartbeatEvery / 2)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			members, err := s.members.List(s.ctx)
			if err != nil {
				continue // the context ended
			}
			listed := make(map[string]bool, len(members))
			for _, m := range members {
				listed[m.Name] = true
			}
			s.mu.Lock()
			inc := slices.Clone(s.inc)
			s.mu.Unlock()
			for slot := range s.seen {
				if listed[memberName(slot, inc[slot])] {
					s.seen[slot].Store(now.UnixNano())
					continue
				}
				if !s.gone(slot) {
					// In one process a silent worker is only starved of CPU
					// (a loaded machine, the race detector): replacing it
					// would throw away live state, spouts and stateful bolts
					// included. Say so once per silence and keep waiting.
					if !s.warned[slot] {
						s.warned[slot] = true
						s.r.log.Warn().Int("worker", slot).Dur("silent", now.Sub(time.Unix(0, s.seen[slot].Load()))).Msg("worker missed its heartbeats but is alive; not replacing it")
					}
					continue
				}
				s.warned[slot] = false
				if rollsBack(s.r.cfg.Guarantee, s.r.ckpt != nil, slices.Contains(s.r.plan.stateless, slot)) {
					s.rollback(slot, now)
				} else {
					s.replace(slot, now)
				}
				// Incarnations changed: the next tick lists the members anew.
				break
			}
		}
	}
}

// rollsBack is the recovery policy of both modes for a worker slot that
// died: roll every task back to the latest checkpoint, or give the slot a
// new owner (local mode: a new incarnation in place; cluster mode: another
// worker process) and replay only the trees in flight. A slot with state
// (a spout, a keyed or Stateful bolt, a transactional sink) rolls back
// when there are checkpoints to restore; without them (local mode only)
// its state is lost either way. In exactly-once any death rolls back, not
// only one that held state: replays after a death come out of the
// sources' order, which event-time logic cannot always absorb, while a
// rollback replays in order.
func rollsBack(g Guarantee, checkpoints, stateless bool) bool {
	return checkpoints && (g == ExactlyOnce || !stateless)
}

// gone reports whether slot's worker really died (its connection is closed),
// as opposed to being slow to heartbeat.
func (s *supervisor) gone(slot int) bool {
	s.mu.Lock()
	w := s.live[slot]
	s.mu.Unlock()
	return w == nil || w.crashed.Load()
}

// replace declares slot dead, starts a new incarnation and broadcasts it.
func (s *supervisor) replace(slot int, now time.Time) {
	s.mu.Lock()
	old := s.live[slot]
	s.live[slot] = nil
	s.mu.Unlock()
	if old != nil {
		// A worker that stopped heartbeating may still be running (a
		// pause): cut it off so it cannot act after being replaced.
		old.crash()
		s.forget(old)
		s.graveyard.Add(1)
		go func() {
			defer s.graveyard.Done()
			old.wg.Wait()
		}()
	}
	died := s.crashedAt[slot].Swap(0)
	if died == 0 {
		died = s.seen[slot].Load()
	}
	s.mu.Lock()
	known := append([]uint64(nil), s.inc...)
	s.mu.Unlock()
	if c := s.r.ckpt; c != nil {
		c.hold()
		defer c.release()
	}
	if err := s.startSlot(slot, true, known); err != nil {
		s.r.log.Error().Err(err).Int("worker", slot).Msg("cannot restart worker; will retry")
		return
	}
	s.mu.Lock()
	inc := s.inc[slot]
	s.mu.Unlock()
	crashID := s.crashID[slot].Swap(0)
	if crashID == 0 {
		crashID = s.crashes.Add(1) // stopped heartbeating on its own
	}
	s.r.log.Warn().Int("worker", slot).Uint64("incarnation", inc).Dur("detected_after", now.Sub(time.Unix(0, died))).Msg("worker declared dead and restarted")
	msg := fmt.Sprintf("dead %d %d %d %d", slot, inc, crashID, died)
	s.nc.Publish(s.r.ctlSubject, []byte(msg))
	s.nc.Flush()
}

// rollback handles the death of a worker that held state (a spout or a
// stateful bolt) when checkpoints are on: every worker is cut off and
// restarted, and every task restores the latest complete checkpoint; the
// spouts seek back to its positions (DESIGN.md section 8). Restarting the
// stateless workers too keeps one path for both guarantees: at-least-once
// would also be served by restoring only the lost tasks and replaying the
// rest, but exactly-once needs every task at the same cut.
func (s *supervisor) rollback(slot int, now time.Time) {
	r := s.r
	restart := r.ckpt.stop()
	committed := r.ckpt.latestLocked()
	defer func() { restart(committed) }()
	s.mu.Lock()
	old := append([]*Worker(nil), s.live...)
	for i := range s.live {
		s.live[i] = nil
	}
	s.mu.Unlock()
	for _, w := range old {
		if w != nil {
			w.crash()
			s.forget(w)
			s.graveyard.Add(1)
			go func(w *Worker) {
				defer s.graveyard.Done()
				w.wg.Wait()
			}(w)
		}
	}
	died := s.crashedAt[slot].Swap(0)
	if died == 0 {
		died = s.seen[slot].Load()
	}
	crashID := s.crashID[slot].Swap(0)
	if crashID == 0 {
		crashID = s.crashes.Add(1)
	}
	rest, err := latestAbove(s.ctx, r.store, r.plan.topo.Name, r.plan.fingerprint(), r.floor.Load())
	switch {
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		rest = nil // no checkpoint yet: every source starts over
	case err != nil:
		r.abort(fmt.Errorf("workers: worker %d died and no checkpoint can be restored: %w", slot, err))
		return
	}
	r.restoreMu.Lock()
	r.restore = rest
	r.restoreMu.Unlock()
	if rest != nil {
		committed = rest.Manifest.Epoch
	}
	// Every slot subscribes before any begins, so that no task publishes to
	// one that has not subscribed yet.
	for sl := 0; sl < r.plan.workers; sl++ {
		if err := s.startSlot(sl, false, nil); err != nil {
			r.abort(fmt.Errorf("workers: cannot restart worker %d after a failure: %w", sl, err))
			return
		}
	}
	s.beginAll()
	r.rollbacks.Add(1)
	r.recov.report(crashID, time.Since(time.Unix(0, died)))
	r.log.Warn().Int("worker", slot).Uint64("epoch", committed).Dur("detected_after", now.Sub(time.Unix(0, died))).Msg("worker with state died; every task restored the latest checkpoint")
}

// crasher kills a stateless worker every period, cycling through them in
// an order drawn from the chaos seed.
func (s *supervisor) crasher(every time.Duration) {
	rng := rand.New(rand.NewPCG(s.r.cfg.Chaos.Seed, 0xc4a5))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			slot := s.r.plan.crashable[rng.IntN(len(s.r.plan.crashable))]
			s.mu.Lock()
			w := s.live[slot]
			s.mu.Unlock()
			if w == nil || w.crashed.Load() {
				continue
			}
			id := s.crashes.Add(1)
			now := time.Now()
			s.crashID[slot].Store(id)
			s.crashedAt[slot].Store(now.UnixNano())
			s.mu.Lock()
			s.crashLog = append(s.crashLog, now)
			s.mu.Unlock()
			s.r.log.Warn().Int("worker", slot).Msg("chaos: crashing worker")
			w.crash()
		}
	}
}

func (s *supervisor) stopWatching() {
	s.stopOnce.Do(func() { close(s.stopCh) })
	s.wg.Wait()
}

func (s *supervisor) shutdownAll() {
	s.stopWatching()
	s.mu.Lock()
	live := append([]*Worker(nil), s.live...)
	s.mu.Unlock()
	for _, w := range live {
		if w != nil {
			w.cancel()
		}
	}
	for _, w := range live {
		if w != nil {
			w.shutdown()
		}
	}
	s.graveyard.Wait()
}

// forget removes a crashed worker's entry from the membership at once,
// rather than letting it expire.
func (s *supervisor) forget(w *Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.members.Leave(ctx, memberName(w.slot, w.incarnation)) // in memory: fails only on a bad name
}

// close removes the last incarnations from the membership, which stops
// their expiry timers, and closes the connection.
func (s *supervisor) close() {
	s.mu.Lock()
	inc := slices.Clone(s.inc)
	s.mu.Unlock()
	for slot, n := range inc {
		if n > 0 {
			_ = s.members.Leave(context.Background(), memberName(slot, n)) // only an entry of a name it never had fails
		}
	}
	s.nc.Close()
}

func (s *supervisor) crashTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.crashLog...)
}
