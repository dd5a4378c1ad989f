package workers

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inProcessForTests makes every local run an in-process cluster, as if
// Config.InProcessCluster were set: the package's tests run local-mode
// tests under cluster mode's control plane with it (export_test.go).
var inProcessForTests atomic.Bool

// RunLocal runs topo in this process until every spout is exhausted and
// everything in flight is processed, or ctx is cancelled. Unless
// cfg.NATSURL is set, it starts an embedded NATS server for the run.
func RunLocal(ctx context.Context, topo *topology.Topology, cfg Config) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.checkpointEvery() > 0 {
		if err := p.positioned(); err != nil {
			return nil, err
		}
	}
	if cfg.Chaos.CrashEvery > 0 && len(p.crashable) == 0 {
		return nil, fmt.Errorf("workers: crash chaos needs a worker without spouts or stateful bolts; placement is %s", p.describe())
	}
	cfg.Logger = cfg.Logger.With().Str("topology", topo.Name).Logger()
	if cfg.InProcessCluster || inProcessForTests.Load() {
		return runInProcessCluster(ctx, topo, cfg)
	}
	r := newRun(topo, p, cfg)
	url, shutdown, err := natsFor(cfg)
	if err != nil {
		return nil, err
	}
	defer shutdown()
	r.url = url
	if r.deadLetters == nil && cfg.DeadLetterStream {
		closeStream, err := r.openDeadLetterStream(ctx)
		if err != nil {
			return nil, err
		}
		defer closeStream()
	}
	if err := r.openCheckpoints(ctx); err != nil {
		return nil, err
	}
	r.log.Info().Str("topology", topo.Name).Str("guarantee", cfg.Guarantee.String()).Str("placement", p.describe()).Msg("starting local run")
	return r.execute(ctx)
}

// natsFor returns the NATS server a local run uses: cfg.NATSURL, or an
// embedded server for the run (with JetStream only for a dead-letter
// stream), which shutdown stops.
func natsFor(cfg Config) (url string, shutdown func(), err error) {
	if cfg.NATSURL != "" {
		return cfg.NATSURL, func() {}, nil
	}
	srv, err := embednats.Start(embednats.Config{NoJetStream: !cfg.DeadLetterStream || cfg.DeadLetters != nil})
	if err != nil {
		return "", nil, err
	}
	return srv.URL(), srv.Shutdown, nil
}

// openDeadLetterStream makes the run's dead letters a JetStream stream on
// its server, and returns what closes it.
func (r *run) openDeadLetterStream(ctx context.Context) (func(), error) {
	nc, err := nats.Connect(r.url, r.natsOptions(nats.Name("ackflow "+r.plan.topo.Name+" dead letters"))...)
	if err != nil {
		return nil, fmt.Errorf("workers: dead letters: cannot connect to NATS at %s: %w", r.url, err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		r.js = js
		r.deadLetters, err = deadletter.NewJetStream(ctx, js, r.plan.topo.Name)
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("workers: dead letters need JetStream on the NATS server (or drop DeadLetterStream): %w", err)
	}
	return func() {
		r.deadLetters.Close()
		nc.Close()
	}, nil
}

func (r *run) execute(ctx context.Context) (*Summary, error) {
	// The workers outlive the caller's ctx by a little: when it is
	// cancelled (Ctrl-C), the run still takes a final checkpoint before it
	// stops them, so that a resumed run starts where this one stopped.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	sup, err := newSupervisor(wctx, r)
	if err != nil {
		return nil, err
	}
	defer sup.close()
	start := time.Now()
	for s := 0; s < r.plan.workers; s++ {
		if err := sup.startSlot(s, false, nil); err != nil {
			sup.shutdownAll()
			return nil, err
		}
	}
	sup.beginAll()
	// The view shows the outcome only once the metrics are final (the
	// deferred removal below runs before this one).
	outcome, viewErr := LocalStopped, error(nil)
	endView := r.cfg.View.attach(r, sup, start)
	defer func() { endView(outcome, viewErr) }()
	stopCkpt := func() {}
	if every := r.cfg.checkpointEvery(); every > 0 {
		c, err := newCoordinator(wctx, r, sup.nc, r.store, r.restoredAt)
		if err != nil {
			outcome, viewErr = LocalFailed, err
			sup.shutdownAll()
			return nil, err
		}
		r.floor.Store(restoreFloor(c.next, r.restoredAt))
		r.ckpt = c
		if r.restoredAt == 0 && c.next > 1 {
			r.log.Warn().Uint64("newest_epoch", c.next-1).Msg("the checkpoint store holds checkpoints of an earlier run; this run starts from the beginning and never restores them (--resume, or Config.Resume, continues from the latest instead)")
		}
		defer r.ckpt.close()
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.ckpt.loop(wctx, every, stop)
		}()
		stopCkpt = func() { close(stop); <-done }
	}
	defer r.showMetrics(r.allTasks(), r.ckpt, true)()
	sup.watch()
	err = r.waitDone(ctx, start)
	stopCkpt()
	if r.ckpt != nil && !r.isAborted() {
		// A last checkpoint records where the run ended, finished or
		// stopped, and lets transactional sinks commit what they hold: a
		// stopped run then resumes exactly where its sinks stopped.
		fctx, fcancel := context.WithTimeout(wctx, r.cfg.CheckpointTimeout+5*time.Second)
		if cerr := r.ckpt.takeFinal(fctx); cerr != nil {
			r.log.Warn().Err(cerr).Msg("the final checkpoint was abandoned; a resumed run starts from the one before")
		}
		fcancel()
	}
	elapsed := time.Since(start)
	sup.stopWatching()
	sup.shutdownAll()
	if err == nil {
		select {
		case <-r.aborted:
			err = r.abortErr
		default:
		}
	}
	switch {
	case err == nil:
		outcome = LocalFinished
	case r.isAborted():
		outcome, viewErr = LocalFailed, err
	}
	sum := r.summary(elapsed, sup.crashes.Load())
	if r.ckpt != nil {
		sum.Checkpoints = r.ckpt.summary()
		sum.Checkpoints.Latest = r.ckpt.latest()
		sum.Checkpoints.RestoredFrom = r.restoredAt
		sum.Checkpoints.Rollbacks = int(r.rollbacks.Load())
	}
	for _, at := range sup.crashTimes() {
		sum.CrashTimes = append(sum.CrashTimes, at.Sub(start))
	}
	return sum, err
}

// waitDone returns when every spout is exhausted, no tree is pending, and
// every record sent has been processed or is known lost. Records that
// vanished without a trace (in a crashed worker, or dropped by NATS) are
// waited for only until nothing has moved for quiet.
func (r *run) waitDone(ctx context.Context, start time.Time) error {
	const quiet = 1500 * time.Millisecond
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	var lastDone int64 = -1
	lastMove := time.Now()
	stable := 0
	var lastProgress time.Time
	var lastRecords int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.aborted:
			return r.abortErr
		case now := <-t.C:
			if r.cfg.Progress != nil && now.Sub(lastProgress) >= r.cfg.ProgressEvery {
				recs := r.records()
				rate := 0.0
				if !lastProgress.IsZero() {
					rate = float64(recs-lastRecords) / now.Sub(lastProgress).Seconds()
				}
				replayed, dead := r.replays()
				r.cfg.Progress(Progress{Elapsed: now.Sub(start), Records: recs, RecordsPerSec: rate, Pending: r.pendingTrees(), InFlight: r.inFlight(),
					Replayed: replayed, DeadLettered: dead})
				lastProgress, lastRecords = now, recs
			}
			done := r.tc.doneRecords.Load()
			if done != lastDone {
				lastDone, lastMove = done, now
			}
			if !r.allExhausted() || r.pendingTrees() > 0 || r.heldFrames() > 0 {
				stable = 0
				continue
			}
			if r.inFlight() == 0 {
				if stable++; stable >= 3 {
					return nil
				}
				continue
			}
			stable = 0
			if now.Sub(lastMove) >= quiet {
				return nil
			}
		}
	}
}
