package workers

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
)

// Leader is the topology leader's part of one generation: it begins the
// generation once every slot is ready, then takes its checkpoints.
type Leader struct {
	r   *run
	g   Generation
	nc  *nats.Conn
	sub *nats.Subscription
	// coord takes the checkpoints; nil when the topology runs without.
	coord *coordinator
	ready map[int]bool
	// ended are the slots whose tasks said they stopped (End), and
	// endedNote wakes End when one says so.
	ended     map[int]bool
	endedNote chan struct{}
	// moving are the slots changing owner, with the incarnation whose
	// "ready" ends the checkpoints' hold (awaitMoves).
	moving map[int]uint64
	waits  map[int]*moveWait // by slot: who to tell once a move is done
	mu     sync.Mutex
	begun  chan struct{}
	began  time.Time
	stop   chan struct{}
	done   chan struct{}
	closed bool
	unshow func() // removes the leader from the metrics registry
}

// LeadGeneration starts leading generation g of topo: the checkpoints
// continue from the newest epoch in the store (numbers are never reused).
// lease, if set, says whether this process still leads: a leader past its
// lease writes no manifest.
func LeadGeneration(ctx context.Context, topo *topology.Topology, cfg Config, g Generation, lease func() error) (*Leader, error) {
	cfg, err := clusterConfig(cfg, g)
	if err != nil {
		return nil, err
	}
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	r := newRun(topo, p, cfg)
	r.gen, r.leaseErr = g.Number, lease
	r.store = cfg.Checkpoints
	nc, err := nats.Connect(r.url, r.natsOptions(nats.Name(fmt.Sprintf("ackflow %s leader of generation %d", topo.Name, g.Number)),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))...)
	if err != nil {
		return nil, fmt.Errorf("workers: leader cannot connect to NATS at %s: %w", r.url, err)
	}
	l := &Leader{r: r, g: g, nc: nc, ready: map[int]bool{}, ended: map[int]bool{}, endedNote: make(chan struct{}, 1), moving: map[int]uint64{}, waits: map[int]*moveWait{}, begun: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.checkpointEvery() > 0 {
		if l.coord, err = newCoordinator(ctx, r, nc, r.store, g.RestoreFrom); err != nil {
			nc.Close()
			return nil, err
		}
	}
	if l.sub, err = nc.Subscribe(barrierSubject(topo.Name), l.onBarrier); err == nil {
		err = nc.Flush()
	}
	if err == nil {
		// Members that joined before this subscription was live said
		// "ready" to no one; they say it again when called, rather than
		// at their next announce (a quarter of a local run's starts
		// waited 100 ms for it).
		err = nc.Publish(barrierSubject(topo.Name), fmt.Appendf(nil, "call %d", g.Number))
	}
	if err != nil {
		l.closeCoordinator()
		nc.Close()
		return nil, fmt.Errorf("workers: leader of generation %d: %w", g.Number, err)
	}
	l.unshow = r.showMetrics(nil, l.coord, false)
	if cfg.figures != nil {
		cfg.figures.led(l)
	}
	go l.loop(ctx)
	return l, nil
}

// onBarrier counts "ready <generation> <slot> <incarnation>" messages and
// says "begin" once every slot is ready, and again to any slot that says
// "ready" later (it missed the first, or moved to another worker).
func (l *Leader) onBarrier(m *nats.Msg) {
	f := strings.Fields(string(m.Data))
	if len(f) != 4 || f[0] != "ready" && f[0] != "ended" {
		return
	}
	gen, err1 := strconv.ParseUint(f[1], 10, 64)
	slot, err2 := strconv.Atoi(f[2])
	inc, err3 := strconv.ParseUint(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || gen != l.g.Number || slot < 0 || slot >= l.g.Slots {
		return
	}
	var moved func()
	defer func() {
		if moved != nil {
			moved()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	if f[0] == "ended" {
		l.ended[slot] = true
		select {
		case l.endedNote <- struct{}{}:
		default:
		}
		return
	}
	l.ready[slot] = true
	if want, ok := l.moving[slot]; ok && inc >= want {
		delete(l.moving, slot)
		if len(l.moving) == 0 {
			l.release()
		}
		if w := l.waits[slot]; w != nil {
			delete(l.waits, slot)
			if w.left--; w.left == 0 {
				moved = w.done
			}
		}
	}
	if len(l.ready) < l.g.Slots || l.closed {
		return
	}
	l.nc.Publish(m.Subject, []byte(fmt.Sprintf("begin %d", l.g.Number)))
	select {
	case <-l.begun:
	default:
		l.began = time.Now()
		close(l.begun)
	}
}

// loop takes checkpoints from when the generation begins until Final or
// Close.
func (l *Leader) loop(ctx context.Context) {
	defer close(l.done)
	select {
	case <-l.begun:
	case <-l.stop:
		return
	case <-ctx.Done():
		return
	}
	if l.coord != nil {
		l.coord.loop(ctx, l.r.cfg.checkpointEvery(), l.stop)
	}
}

// awaitMoves holds the generation's checkpoints while slots change owner
// (a slot and the incarnation it moves as): a checkpoint in progress gives
// up, since the dead owner's tasks never answer it, and the next waits
// until every moved slot's new owner says it is ready, so that its tasks
// have subscribed to the checkpoint commands. If one never does, the
// checkpoints go on after twice the checkpoint timeout. done, if set, is
// called once every one of these slots' new owners is ready. cancel ends
// the wait at once (the moves were not written after all).
func (l *Leader) awaitMoves(slots map[int]uint64, done func()) (cancel func()) {
	l.mu.Lock()
	maps.Copy(l.moving, slots)
	w := &moveWait{left: len(slots), done: done}
	for slot := range slots {
		l.waits[slot] = w
	}
	l.mu.Unlock()
	if l.coord != nil {
		l.coord.hold()
	}
	giveUp := func(why string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for slot, inc := range slots {
			if l.moving[slot] == inc {
				if why != "" {
					l.r.log.Warn().Int("slot", slot).Uint64("incarnation", inc).Msg(why)
				}
				delete(l.moving, slot)
			}
			if l.waits[slot] == w {
				delete(l.waits, slot)
			}
		}
		if len(l.moving) == 0 {
			l.release()
		}
	}
	t := time.AfterFunc(2*l.r.cfg.CheckpointTimeout, func() {
		giveUp("a moved slot's new owner is not ready yet; checkpoints go on without waiting")
	})
	return func() {
		t.Stop()
		giveUp("")
	}
}

// moveWait is one awaitMoves call: how many of its slots' new owners are
// not ready yet, and what to call when all are.
type moveWait struct {
	left int
	done func()
}

// Begun is closed when every slot is ready and the generation began.
func (l *Leader) Begun() <-chan struct{} { return l.begun }

// beganAt returns when the generation began, if it has.
func (l *Leader) beganAt() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.began, !l.began.IsZero()
}

// Ready returns how many slots are ready of how many.
func (l *Leader) Ready() (ready, slots int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ready), l.g.Slots
}

// Final stops the periodic checkpoints and takes the one that ends the
// generation: the spouts stop reading, every tree in flight completes,
// the state is saved and transactional sinks commit. The spouts stay
// paused, so the members can then be stopped without losing anything.
// Without checkpoints there is nothing to take.
func (l *Leader) Final(ctx context.Context) error {
	l.halt()
	select {
	case <-l.begun:
	default:
		return fmt.Errorf("workers: generation %d never began, so there is nothing to checkpoint", l.g.Number)
	}
	if l.coord == nil {
		return nil
	}
	return l.coord.takeFinal(ctx)
}

// End ends a generation without checkpoints: every member stops its
// tasks gracefully (their Cleanup runs, so sinks commit what they hold)
// and says so; End returns once every slot has, or with an error naming
// those that did not when ctx ends. The tasks of a generation whose
// sources are exhausted have processed every record by then.
func (l *Leader) End(ctx context.Context) error {
	l.halt()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	say := func() { l.nc.Publish(barrierSubject(l.r.plan.topo.Name), []byte(fmt.Sprintf("end %d", l.g.Number))) }
	if err := ctx.Err(); err != nil {
		// A leader that stops, or has lost its lead, ends nothing: the
		// one after it decides.
		return fmt.Errorf("workers: generation %d not ended: %w", l.g.Number, err)
	}
	say()
	for {
		l.mu.Lock()
		var left []int
		for slot := range l.g.Slots {
			if !l.ended[slot] {
				left = append(left, slot)
			}
		}
		l.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workers: generation %d: slots %v did not say their tasks stopped: %w", l.g.Number, left, ctx.Err())
		case <-l.endedNote: // a slot said it stopped: look again
		case <-t.C:
			say() // to any member that missed it
		}
	}
}

// Checkpoint takes a checkpoint now (between the periodic ones).
func (l *Leader) Checkpoint(ctx context.Context) error {
	if l.coord == nil {
		return fmt.Errorf("workers: topology %s runs without checkpoints", l.r.plan.topo.Name)
	}
	return l.coord.take(ctx)
}

// Latest is the latest complete epoch (the generation's RestoreFrom until
// it takes one; 0 without checkpoints).
func (l *Leader) Latest() uint64 {
	if l.coord == nil {
		return 0
	}
	return l.coord.latest()
}

// Checkpoints summarises the generation's checkpoints.
func (l *Leader) Checkpoints() CheckpointSummary {
	if l.coord == nil {
		return CheckpointSummary{}
	}
	s := l.coord.summary()
	s.Latest, s.RestoredFrom = l.coord.latest(), l.g.RestoreFrom
	return s
}

// release lets the held checkpoints go on.
func (l *Leader) release() {
	if l.coord != nil {
		l.coord.release()
	}
}

func (l *Leader) closeCoordinator() {
	if l.coord != nil {
		l.coord.close()
	}
}

func (l *Leader) halt() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	// A checkpoint in progress gives up at once; interrupt again until the
	// loop has returned, in case a checkpoint began after the first.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var interrupt chan struct{}
	if l.coord != nil {
		interrupt = l.coord.interrupt
	}
	for {
		select {
		case interrupt <- struct{}{}:
		default:
		}
		select {
		case <-l.done:
			return
		case <-t.C:
		}
	}
}

// Close stops leading the generation (a new one replaces it, or this
// process lost the lead).
func (l *Leader) Close() {
	l.halt()
	if f := l.r.cfg.figures; f != nil {
		f.unled(l)
	}
	l.unshow()
	l.closeCoordinator()
	l.nc.Close()
}
