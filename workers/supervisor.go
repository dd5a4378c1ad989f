package workers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/nats-io/nats.go"
)

// supervisor starts the worker slots, detects dead workers from missing
// heartbeats, restarts them and tells the others (local mode's stand-in for
// the cluster's KV-based membership).
type supervisor struct {
	ctx  context.Context
	r    *run
	nc   *nats.Conn
	mu   sync.Mutex
	live []*Worker
	inc  []uint64
	seen []atomic.Int64 // per slot: unix nanos of the last heartbeat

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
	nc, err := nats.Connect(r.url, r.natsOptions(nats.Name("ackflow "+r.plan.topo.Name+" supervisor"))...)
	if err != nil {
		return nil, fmt.Errorf("workers: supervisor cannot connect to NATS at %s: %w", r.url, err)
	}
	n := r.plan.workers
	s := &supervisor{ctx: ctx, r: r, nc: nc, live: make([]*Worker, n), inc: make([]uint64, n),
		seen: make([]atomic.Int64, n), crashedAt: make([]atomic.Int64, n), crashID: make([]atomic.Int64, n), warned: make([]bool, n), stopCh: make(chan struct{})}
	if _, err := nc.Subscribe(r.hbSubject, s.onHeartbeat); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nc.Flush()
}

func (s *supervisor) onHeartbeat(m *nats.Msg) {
	f := strings.Fields(string(m.Data))
	var slot int
	var inc uint64
	var err, err2 error
	if len(f) == 2 {
		slot, err = strconv.Atoi(f[0])
		inc, err2 = strconv.ParseUint(f[1], 10, 64)
	}
	if len(f) != 2 || err != nil || err2 != nil || slot < 0 || slot >= len(s.seen) {
		s.r.tc.badFrames.Add(1)
		s.r.warn.Warn().Str("subject", m.Subject).Int("bytes", len(m.Data)).Msg("dropped a heartbeat that does not parse")
		return
	}
	s.mu.Lock()
	current := s.inc[slot] == inc
	s.mu.Unlock()
	if current {
		s.seen[slot].Store(time.Now().UnixNano())
	}
}

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
			for slot := range s.seen {
				if now.Sub(time.Unix(0, s.seen[slot].Load())) < s.r.cfg.DeadAfter {
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
				// In exactly-once mode any worker's death rolls back, not
				// only one that held state: replays after a death come out
				// of the sources' order, which event-time logic cannot
				// always absorb, while a rollback replays in order.
				if s.r.ckpt != nil && (s.r.cfg.Guarantee == ExactlyOnce || !slices.Contains(s.r.plan.stateless, slot)) {
					s.rollback(slot, now)
				} else {
					s.replace(slot, now)
				}
			}
		}
	}
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
	rest, err := checkpoint.Latest(s.ctx, r.store, r.plan.topo.Name, r.plan.fingerprint())
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

func (s *supervisor) close() { s.nc.Close() }

func (s *supervisor) crashTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.crashLog...)
}
