package workers

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// inCluster is a local run (RunLocal) under cluster mode's control
// plane: cfg.Workers nodes in this process coordinate
// through an in-memory cluster, and the run is a submission that their
// leader places, fails over, checkpoints and ends, as in a cluster of
// worker processes. Records travel over NATS as in every mode.
type inCluster struct {
	topo   *topology.Topology
	cfg    Config // the caller's
	rt     Config // the nodes' runtime configuration
	url    string
	memory *cluster.MemoryCluster
	client cluster.Coordination
	fig    *figures
	names  []string
	// protect keeps crash chaos off the node that holds the stateful
	// tasks, when there are no checkpoints to restore them from.
	protect bool
	// movable are the spouts that protect leaves to crash chaos: a spout
	// over a rewindable source reads on from the position it wrote
	// (spoutPositions: at most once, before it sent; at least once, before
	// its oldest root not yet done), so its task may start again elsewhere
	// without sending anything twice or reading its source from the
	// beginning.
	movable map[string]bool

	// refs are the tasks, by ID, for the status page.
	refs []TaskRef

	mu       sync.Mutex
	nodes    map[string]*inNode
	starts   map[string]uint64    // per node: how often it started
	seen     map[string]time.Time // per node: its latest start or report
	crashes  []time.Time
	nodeErrs chan error
}

// inNode is one running node.
type inNode struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	co     cluster.Coordination // its handles, once bound; c.mu
}

// running reports whether the node name runs (neither crashed nor
// stopped). It takes c.mu only, never the cluster's locks.
func (c *inCluster) running(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.nodes[name]
	return ok
}

// inClusterTiming is how often the nodes report their tasks, and their
// leaders look at the reports: a run ends three rounds after its last
// record is processed. In one process the reports cost little: at 5 ms a
// run of 10,000 random lines at 2,000 lines/s took 3% more CPU than
// under the supervisor that local runs had before, and the benchmark's
// 0.1 s runs ended as soon (at 20 ms they lost 40% of their rate to the
// end of the run).
const inClusterTiming = 5 * time.Millisecond

// inClusterQuiet is how long a node's report may wait when it would tell
// the leader nothing new (NodeConfig.quietEvery): the ones that end a run
// still go out within inClusterTiming.
const inClusterQuiet = 100 * time.Millisecond

// runInProcessCluster runs topo, whose tasks under cfg are refs.
func runInProcessCluster(ctx context.Context, topo *topology.Topology, cfg Config, refs []TaskRef) (*Summary, error) {
	c := &inCluster{topo: topo, cfg: cfg, rt: cfg, fig: newFigures(), refs: refs, nodes: map[string]*inNode{}, starts: map[string]uint64{}, seen: map[string]time.Time{}, nodeErrs: make(chan error, cfg.Workers)}
	url, opts, shutdown, err := natsFor(cfg)
	if err != nil {
		return nil, err
	}
	defer shutdown()
	c.url = url
	c.cfg.NATSOptions, c.rt.NATSOptions = opts, opts
	timing := cluster.MembersConfig{HeartbeatEvery: cfg.HeartbeatEvery, DeadAfter: cfg.DeadAfter}
	if c.memory, err = cluster.NewMemoryCluster(timing); err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	// Every node runs in this process, which knows when one crashed: a
	// heartbeat late only because the process is busy must not pass for
	// a death, which would move the node's tasks (without checkpoints,
	// start its spouts' sources again) for nothing.
	c.memory.HoldMembers(c.running)
	if c.client, err = c.memory.Open(timing); err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	rt := &c.rt
	// The nodes' tasks see the frame chaos; this run crashes the nodes.
	// Their members and leaders show themselves in the caller's metrics
	// registry, which adds up the series they share.
	rt.NATSURL, rt.Progress, rt.View, rt.figures, rt.Chaos.CrashEvery = c.url, nil, nil, c.fig, 0
	if rt.Checkpoints == nil {
		rt.Checkpoints = checkpoint.NewMemory()
	}
	var letters *deadletter.Memory
	if rt.DeadLetters == nil && !rt.DeadLetterStream {
		letters = deadletter.NewMemory()
		rt.DeadLetters = letters
	}
	c.protect = cfg.Chaos.CrashEvery > 0 && cfg.checkpointEvery() == 0
	c.movable = map[string]bool{}
	for _, comp := range topo.Components {
		if comp.IsSpout() && cfg.Guarantee != ExactlyOnce {
			_, c.movable[comp.Name] = comp.SpoutFn().(topology.Positioned)
		}
	}
	for i := range cfg.Workers {
		c.names = append(c.names, fmt.Sprintf("worker-%d", i))
	}
	defer c.stopAll()
	for _, name := range c.names {
		c.start(name)
	}
	if err := c.awaitMembers(ctx); err != nil {
		return nil, err
	}
	if cfg.inCluster != nil {
		cfg.inCluster(c)
	}
	spec := cluster.Spec{Name: topo.Name, Guarantee: cfg.Guarantee.String(), Parallelism: cfg.Parallelism, CheckpointEvery: cfg.checkpointEvery(),
		NoCheckpoints: cfg.checkpointEvery() == 0, Resume: cfg.Resume, FailAfter: 1}
	if err := c.client.Registry.Submit(ctx, spec); err != nil {
		return nil, fmt.Errorf("workers: cannot submit %s to the in-process cluster: %w", topo.Name, err)
	}
	cfg.Logger.Info().Str("guarantee", cfg.Guarantee.String()).Strs("workers", c.names).Msg("starting local run as an in-process cluster")
	start := time.Now()
	outcome, viewErr := LocalStopped, error(nil)
	endView := cfg.View.show(func() LocalStatus { return c.status(start) })
	defer func() { endView(outcome, viewErr) }()
	var crasher sync.WaitGroup
	stopCrashes := make(chan struct{})
	if every := cfg.Chaos.CrashEvery; every > 0 {
		crasher.Add(1)
		go func() {
			defer crasher.Done()
			c.crashChaos(every, stopCrashes)
		}()
	}
	runErr := c.await(ctx, start)
	close(stopCrashes)
	crasher.Wait()
	elapsed := time.Since(start)
	// The nodes stop their members gracefully (Cleanup runs) when they see
	// the submission finished, failed or killed; stopping a node first
	// would crash them, as a worker process that stops does.
	if spec, _, err := c.client.Registry.Get(context.Background(), topo.Name); err == nil && !live(spec.State) {
		c.awaitMembersStopped()
	}
	c.stopAll()
	c.mu.Lock()
	crashes := slices.Clone(c.crashes)
	c.mu.Unlock()
	sum := c.fig.summary(crashes)
	sum.Topology, sum.Guarantee, sum.Workers, sum.Duration = topo.Name, cfg.Guarantee, cfg.Workers, elapsed
	if sum.firstRoot > 0 {
		sum.FirstRecordAfter = time.Unix(0, sum.firstRoot).Sub(start)
	}
	if sum.lastTree > 0 {
		sum.EndedAfterLastTree = elapsed - time.Unix(0, sum.lastTree).Sub(start)
	}
	if elapsed > 0 {
		sum.RecordsPerSec = float64(sum.Records) / elapsed.Seconds()
	}
	sum.Crashes = len(crashes)
	for _, at := range crashes {
		sum.CrashTimes = append(sum.CrashTimes, at.Sub(start))
	}
	switch {
	case letters != nil:
		sum.DeadLetters = letters.Letters()
	case rt.DeadLetterStream && rt.DeadLetters == nil && sum.DeadLettered > 0:
		c.readDeadLetters(sum)
	}
	switch {
	case runErr == nil:
		outcome = LocalFinished
	case ctx.Err() == nil:
		outcome, viewErr = LocalFailed, runErr
	}
	return sum, runErr
}

// status is the run as the status page of a local run shows it: a worker
// per node (its incarnation counts its starts), the current generation's
// tasks as their owners last reported them, and the figures so far.
func (c *inCluster) status(start time.Time) LocalStatus {
	st := LocalStatus{Topology: c.topo.Name, Guarantee: c.cfg.Guarantee, Started: start, State: LocalRunning}
	ctx := context.Background()
	reports := map[string]Report{}
	if raw, err := c.client.Statuses.List(ctx, c.topo.Name); err == nil {
		for _, cr := range raw {
			if rep, err := DecodeReport(cr); err == nil {
				reports[rep.Member] = rep
			}
		}
	}
	c.mu.Lock()
	st.Crashes = int64(len(c.crashes))
	index := map[string]int{}
	for i, name := range c.names {
		index[name] = i
		// A node's report is its heartbeat here; before its first, its
		// start, and once it stopped, the last it wrote.
		if rep, ok := reports[name]; ok && rep.Updated.After(c.seen[name]) {
			c.seen[name] = rep.Updated
		}
		_, running := c.nodes[name]
		st.Workers = append(st.Workers, LocalWorker{Slot: i, Incarnation: c.starts[name], Crashed: !running, Heartbeat: c.seen[name]})
	}
	starts := maps.Clone(c.starts)
	c.mu.Unlock()
	if g, _, err := c.client.Generations.Current(ctx, c.topo.Name); err == nil {
		for _, id := range slices.Sorted(maps.Keys(g.Assignment)) {
			owner := g.Owner(g.Assignment[id])
			i, ok := index[owner]
			if !ok || id >= len(c.refs) {
				continue
			}
			t := LocalTask{TaskStatus: TaskStatus{Task: id, Component: c.refs[id].Component, Index: c.refs[id].Index}, Worker: i, Epoch: starts[owner]}
			if rep, ok := reports[owner]; ok && rep.Status != nil && rep.Generation == g.Number {
				for _, ts := range rep.Status.Tasks {
					if ts.Task == id {
						t.TaskStatus = ts
					}
				}
			}
			st.Tasks = append(st.Tasks, t)
			st.Workers[i].Tasks++
		}
	}
	st.Components = c.fig.components()
	return st
}

// place is local mode's placement for the leader: round-robin over the
// nodes in their order, the ackers beside the spouts (withSpouts), and with
// protect the spouts and stateful bolts on the first live node, away from
// the nodes crash chaos crashes, and the ackers round-robin over the others
// (crash chaos still crashes them: a lost acker is part of what such runs
// test). Spouts over rewindable sources (movable) go with the others:
// their positions survive a crash.
func (c *inCluster) place(tasks []TaskRef, live []string) map[int]string {
	var order []string
	for _, n := range c.names {
		if slices.Contains(live, n) {
			order = append(order, n)
		}
	}
	out := make(map[int]string, len(tasks))
	next := 0
	for _, t := range tasks {
		switch {
		case c.protect && len(order) > 1 && t.Stateful && !c.movable[t.Component]:
			out[t.ID] = order[0]
		case c.protect && len(order) > 1:
			out[t.ID] = order[1+next%(len(order)-1)]
			next++
		default:
			out[t.ID] = order[next%len(order)]
			next++
		}
	}
	if c.protect && len(order) > 1 {
		return out
	}
	return withSpouts(tasks, out)
}

// start runs the node name until it is stopped or crashed.
func (c *inCluster) start(name string) {
	ctx, cancel := context.WithCancelCause(context.Background())
	n := &inNode{cancel: cancel, done: make(chan struct{})}
	c.mu.Lock()
	c.nodes[name] = n
	c.starts[name]++
	c.seen[name] = time.Now()
	c.mu.Unlock()
	opened := func(co cluster.Coordination) {
		c.mu.Lock()
		n.co = co
		c.mu.Unlock()
	}
	cfg := NodeConfig{Name: name, NATSURL: c.url, Runtime: c.rt, Memory: c.memory, StatusEvery: inClusterTiming, quietEvery: inClusterQuiet, Place: c.place, named: c.topo.Name, opened: opened,
		Members:    cluster.MembersConfig{HeartbeatEvery: c.rt.HeartbeatEvery, DeadAfter: c.rt.DeadAfter},
		Topologies: map[string]func(map[string]string) (*topology.Topology, error){c.topo.Name: func(map[string]string) (*topology.Topology, error) { return c.topo, nil }}}
	go func() {
		defer close(n.done)
		if err := RunNode(ctx, cfg); err != nil && ctx.Err() == nil {
			c.nodeErrs <- fmt.Errorf("workers: node %s of the in-process cluster stopped: %w", name, err)
		}
	}()
}

// stop ends the node name: gracefully, or as a crash.
func (c *inCluster) stop(name string, crash bool) {
	c.mu.Lock()
	n := c.nodes[name]
	delete(c.nodes, name)
	c.mu.Unlock()
	if n == nil {
		return
	}
	if crash {
		n.cancel(errNodeCrash)
	} else {
		n.cancel(nil)
	}
	<-n.done
}

func (c *inCluster) stopAll() {
	for _, name := range c.names {
		c.stop(name, false)
	}
}

// awaitMembers waits until every node has joined, so that the first
// generation places the tasks over all of them.
func (c *inCluster) awaitMembers(ctx context.Context) error {
	deadline := time.Now().Add(10*time.Second + 2*c.rt.DeadAfter)
	for {
		ms, err := c.client.Members.List(ctx)
		if err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		if len(ms) == len(c.names) {
			return nil
		}
		select {
		case err := <-c.nodeErrs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workers: %d of the %d nodes of the in-process cluster joined in %v", len(ms), len(c.names), time.Until(deadline))
		}
	}
}

// awaitMembersStopped waits until no member of the run is left, or
// memberStopWait has passed (a Cleanup that hangs).
func (c *inCluster) awaitMembersStopped() {
	deadline := time.Now().Add(memberStopWait)
	for c.fig.running() > 0 {
		if time.Now().After(deadline) {
			c.cfg.Logger.Warn().Int("members", c.fig.running()).Dur("waited", memberStopWait).Msg("tasks did not stop after the run ended; stopping their nodes")
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memberStopWait bounds how long a run that ended waits for its tasks'
// Cleanup.
const memberStopWait = 30 * time.Second

// await follows the submission until it is finished, failed, or killed
// after ctx ended, and calls Progress meanwhile. It looks at the
// submission when the registry says it changed, and every 10 ms in case
// the watch broke: a 10 ms poll alone ended a run 5 ms after its state
// said finished on average, half a percent of a benchmark's second-long
// run.
func (c *inCluster) await(ctx context.Context, start time.Time) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	changes, err := c.client.Registry.Watch(wctx)
	if err != nil {
		changes = nil // the ticker alone
	}
	cancelled := ctx.Done() // nil once seen, so that a kill waits on the rest
	var killing bool
	var killDeadline time.Time
	var lastProgress time.Time
	var lastRecords int64
	for {
		select {
		case <-cancelled:
			cancelled = nil
		case err := <-c.nodeErrs:
			return err
		case <-t.C:
		case ev, ok := <-changes:
			if !ok {
				changes = nil
			} else if ev.Spec.Name != c.topo.Name {
				continue
			}
		}
		now := time.Now()
		if c.cfg.Progress != nil && now.Sub(lastProgress) >= c.cfg.ProgressEvery {
			p := c.fig.progress()
			p.Elapsed = now.Sub(start)
			if !lastProgress.IsZero() {
				p.RecordsPerSec = float64(p.Records-lastRecords) / now.Sub(lastProgress).Seconds()
			}
			c.cfg.Progress(p)
			lastProgress, lastRecords = now, p.Records
		}
		spec, rev, err := c.client.Registry.Get(context.Background(), c.topo.Name)
		if err != nil {
			return fmt.Errorf("workers: the in-process cluster lost its submission: %w", err)
		}
		switch spec.State {
		case cluster.StateFinished:
			return nil
		case cluster.StateFailed:
			return fmt.Errorf("workers: %s failed: %s", c.topo.Name, spec.Error)
		case cluster.StateKilled:
			return ctx.Err()
		}
		if ctx.Err() == nil {
			continue
		}
		if !killing {
			// Ctrl-C: as ackflow kill does, the leader takes a final
			// checkpoint (a resumed run continues from it) and stops. A
			// topology already finishing is let finish.
			if spec.State == cluster.StateRunning {
				spec.State = cluster.StateKilling
				if _, err := c.client.Registry.Update(context.Background(), spec, rev); err != nil {
					continue // the leader changed it meanwhile: look again
				}
			}
			killing, killDeadline = true, now.Add(c.cfg.CheckpointTimeout+10*time.Second)
		}
		if now.After(killDeadline) {
			c.cfg.Logger.Warn().Msg("the in-process cluster did not stop the topology in time; stopping its nodes")
			return ctx.Err()
		}
	}
}

// crashChaos crashes a node every period, and starts it again at once
// under its name (it rejoins once its entry has expired, as a restarted
// process does). Without checkpoints it spares the node that holds the
// stateful tasks (place), whose state a crash would lose; spouts over
// rewindable sources are not among them (movable).
func (c *inCluster) crashChaos(every time.Duration, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(c.cfg.Chaos.Seed, 0xc4a5))
	candidates := c.names
	if c.protect {
		candidates = c.names[1:]
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		name := candidates[rng.IntN(len(candidates))]
		if !c.listed(name) {
			continue // not back from its last crash yet
		}
		if c.drained() {
			continue // the run is ending: see drained
		}
		c.rt.Logger.Warn().Str("worker", name).Msg("chaos: crashing worker")
		c.mu.Lock()
		c.crashes = append(c.crashes, time.Now())
		c.mu.Unlock()
		c.stop(name, true)
		// As a restarted process would, it waits for its entry to expire
		// before it joins again.
		for c.listed(name) {
			select {
			case <-stop:
				return
			case <-time.After(c.rt.HeartbeatEvery / 2):
			}
		}
		c.start(name)
	}
}

// drained reports whether the newest generation's workers all say that
// its spouts are exhausted with no tree pending: the input is read and
// processed, and the leader is about to end the run (it waits for three
// such rounds of reports, so a crash decided before this says true cannot
// come after the final checkpoint). Crash chaos stops there: a crash after
// the final checkpoint loses nothing (the checkpoint holds the state), but
// it keeps the crashed tasks' Cleanup from running, so what they hand on
// there (word count's counts, which `ackflow run wordcount` prints) would
// be missing from the result. A rollback that starts the spouts again
// makes it false again.
func (c *inCluster) drained() bool {
	raw, err := c.client.Statuses.List(context.Background(), c.topo.Name)
	if err != nil {
		return false
	}
	var newest uint64
	var reps []Report
	for _, cr := range raw {
		rep, err := DecodeReport(cr)
		if err != nil || rep.Status == nil {
			continue
		}
		reps = append(reps, rep)
		newest = max(newest, rep.Generation)
	}
	spouts := 0
	for _, rep := range reps {
		if rep.Generation != newest {
			continue
		}
		for _, t := range rep.Status.Tasks {
			if !t.Spout {
				continue
			}
			if !t.Exhausted || t.Pending > 0 {
				return false
			}
			spouts++
		}
	}
	return spouts > 0
}

// listed reports whether the membership lists the node name (false when
// it cannot be read).
func (c *inCluster) listed(name string) bool {
	ms, err := c.client.Members.List(context.Background())
	return err == nil && slices.ContainsFunc(ms, func(m cluster.Member) bool { return m.Name == name })
}

// readDeadLetters reads the dead letters back from their stream.
func (c *inCluster) readDeadLetters(sum *Summary) {
	nc, err := nats.Connect(c.url, c.cfg.NATSOptions...)
	if err == nil {
		defer nc.Close()
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stream *deadletter.JetStream
			if stream, err = deadletter.NewJetStream(ctx, js, c.topo.Name); err == nil {
				sum.DeadLetterStream = stream.Stream()
				stream.Close()
				sum.DeadLetters, err = deadletter.ReadJetStream(ctx, js, c.topo.Name)
			}
		}
	}
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Msg("cannot read the dead letters back for the summary")
	}
}
