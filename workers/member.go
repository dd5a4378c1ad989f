package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster mode, the runtime's side (DESIGN.md section 7). Package cluster
// decides who runs what: it writes generations of a topology, each a plan
// (parallelism), an assignment of every task to a worker process, and the
// checkpoint its tasks restore from. Here a worker process runs its part
// of one generation (Member), and the topology's leader runs the
// generation's checkpoints and start barrier (Leader).
//
// Every task of a generation starts from the same checkpoint, so a
// generation change is a rollback of the whole topology: the sources seek
// back to the checkpoint's positions and the keyed state is that of the
// checkpoint (split by key group if the parallelism changed). The
// generation number is the fencing epoch of every frame and checkpoint
// command: a worker that has not yet heard of a new generation, or was
// paused past its lease, is ignored by the others.

// TaskRef names one task of a plan.
type TaskRef struct {
	ID        int    // the task ID, the index in the plan's task list
	Component string // the component's name, or "__acker"
	Index     int    // the task's index among its component's tasks
	Stateful  bool   // a spout, a keyed or Stateful bolt, or a transactional sink
	Spout     bool   // a spout task
}

// Key names the task for assignment: "component[index]". A task keeps
// its key across rebalances of other components, so rendezvous hashing
// keeps it where it was.
func (t TaskRef) Key() string { return fmt.Sprintf("%s[%d]", t.Component, t.Index) }

// Tasks lists the tasks of topo under cfg (its guarantee, ackers and
// parallelism overrides) in task ID order: what a generation assigns.
func Tasks(topo *topology.Topology, cfg Config) ([]TaskRef, error) {
	cfg.assign = nil
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	return p.refs(), nil
}

// refs names the plan's tasks, in task ID order.
func (p *plan) refs() []TaskRef {
	refs := make([]TaskRef, len(p.tasks))
	for i, t := range p.tasks {
		refs[i] = TaskRef{ID: t.id, Component: t.name, Index: t.index, Stateful: t.stateful, Spout: t.comp != nil && t.comp.IsSpout()}
	}
	return refs
}

// Fingerprint names the shape of topo: its components, streams, groupings
// and key groups, not its parallelism. A checkpoint restores only into a
// topology of the same fingerprint, and a worker built from another
// version of a topology refuses the tasks of its generations.
func Fingerprint(topo *topology.Topology) string {
	return (&plan{topo: topo}).fingerprint()
}

// Generation is what a worker process needs of one generation of a
// topology.
type Generation struct {
	// Number is the fencing epoch: every frame and checkpoint command of
	// the generation carries it, and the others are dropped. Numbers start
	// at 1 and only grow.
	Number uint64
	// Slots is the number of worker processes in the generation; Assign
	// gives the slot of every task, by task ID (see Tasks).
	Slots  int
	Assign []int
	// RestoreFrom is the checkpoint epoch every task starts from; 0 starts
	// from the beginning of the sources.
	RestoreFrom uint64
	// Incarnations counts, per slot, the owners it had in this
	// generation before the current one (nil: none moved; see
	// cluster.Move); DiedAt is when the previous owner of a moved slot
	// was found dead.
	Incarnations []uint64
	DiedAt       []time.Time
}

// incarnation returns slot's count of earlier owners in g.
func (g Generation) incarnation(slot int) uint64 {
	if slot < len(g.Incarnations) {
		return g.Incarnations[slot]
	}
	return 0
}

// incarnationBits is how many low bits of a cluster-mode frame epoch
// number a slot's owners within its generation; the rest is the
// generation number.
const incarnationBits = 20

// FrameEpoch is the fencing epoch a task of slot incarnation inc of
// generation gen stamps on its frames and records in cluster mode.
// Receivers drop frames of another generation, and records of an earlier
// incarnation of the sender's slot than the newest they heard of.
func FrameEpoch(gen, inc uint64) uint64 { return gen<<incarnationBits | inc }

// clusterConfig checks what cluster mode needs of cfg and g and fills in
// the generation's layout.
func clusterConfig(cfg Config, g Generation) (Config, error) {
	switch {
	case g.Number == 0:
		return cfg, errors.New("workers: generation 0; cluster generations start at 1")
	case g.Slots < 1:
		return cfg, fmt.Errorf("workers: generation %d has %d worker slots", g.Number, g.Slots)
	case cfg.NATSURL == "":
		return cfg, errors.New("workers: cluster mode needs the NATS URL of the cluster")
	case cfg.checkpointEvery() > 0 && cfg.Checkpoints == nil:
		return cfg, errors.New("workers: cluster mode with checkpoints needs a checkpoint store every worker can reach (a JetStream object store)")
	case cfg.Chaos.CrashEvery > 0:
		return cfg, errors.New("workers: crash chaos is local mode's; in cluster mode kill worker processes")
	}
	cfg.Workers, cfg.assign, cfg.Resume = g.Slots, g.Assign, false
	if cfg.DeadLetters == nil {
		cfg.DeadLetterStream = true
	}
	return cfg, cfg.Validate()
}

// barrierSubject carries a generation's start barrier: "ready <generation>
// <slot>" from members that have subscribed, "begin <generation>" from the
// leader once every slot is ready. No task emits before every task of the
// generation has subscribed, or its records would go to nobody.
func barrierSubject(topo string) string { return "ackflow." + topo + ".gen" }

// Member runs the tasks one worker process has in one generation.
type Member struct {
	r     *run
	w     *Worker
	g     Generation
	slot  int
	sub   *nats.Subscription
	begun chan struct{}
	once  sync.Once
	stop  chan struct{}
	wg    sync.WaitGroup
	ended atomic.Bool
	// endDone is closed once the member has ended: a second end waits
	// for the first.
	endDone chan struct{}
	close   func()
	// unshow removes the member from the metrics registry.
	unshow func()
}

// JoinGeneration starts this process's tasks of generation g (those Assign
// gives slot): it restores their state from the generation's checkpoint,
// subscribes them, and tells the leader it is ready. The tasks begin when
// the leader says every slot is ready. lease, if set, says whether this
// process's membership is still valid: a member past its lease commits
// nothing (no manifest, no transactional sink).
func JoinGeneration(ctx context.Context, topo *topology.Topology, cfg Config, g Generation, slot int, lease func() error) (*Member, error) {
	cfg, err := clusterConfig(cfg, g)
	if err != nil {
		return nil, err
	}
	if slot < 0 || slot >= g.Slots {
		return nil, fmt.Errorf("workers: slot %d of a generation of %d", slot, g.Slots)
	}
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	checkpoints := cfg.checkpointEvery() > 0
	if checkpoints {
		if err := p.positioned(); err != nil {
			return nil, err
		}
	}
	r := newRun(topo, p, cfg)
	if cfg.Metrics == nil && cfg.figures == nil {
		// The status reports show the bolts' capacity and the latencies
		// (ackflow ui), which need the tasks timed. A local run's nodes
		// report to no one but their leader, which reads neither: there
		// only metrics time them.
		r.timeTasks()
	}
	r.gen, r.leaseErr = g.Number, lease
	// A moved slot has nothing to restore: with checkpoints it holds
	// stateless tasks only (the leader moves no other), and the slots that
	// kept running hold the topology's state; without, its tasks start
	// without the state their previous owner had (the leader said so).
	moved := g.incarnation(slot) > 0
	restoreFrom := g.RestoreFrom
	if moved {
		if checkpoints && !slices.Contains(p.stateless, slot) {
			return nil, fmt.Errorf("workers: generation %d moved slot %d, which holds stateful tasks; only a new generation can restore them", g.Number, slot)
		}
		restoreFrom = 0
	}
	if err := r.restoreEpoch(ctx, restoreFrom); err != nil {
		return nil, err
	}
	closeLetters := func() {}
	if r.deadLetters == nil {
		if closeLetters, err = r.openDeadLetterStream(ctx); err != nil {
			return nil, err
		}
	}
	epochs := make([]uint64, g.Slots)
	for i := range epochs {
		epochs[i] = FrameEpoch(g.Number, g.incarnation(i))
	}
	// A slot that moved joins a generation whose other slots kept
	// running: the frame filter must not ask for what they sent its
	// previous owner (see frameFilter.newEpoch).
	var known []uint64
	if moved {
		known = epochs
	}
	// The tasks outlive ctx: only Stop and Crash end them, so that the
	// caller's cancellation cannot pass for a graceful stop (which runs
	// Cleanup) of tasks whose generation is over.
	w, err := startWorker(context.WithoutCancel(ctx), r, slot, epochs[slot], epochs, known)
	if err != nil {
		closeLetters()
		return nil, err
	}
	m := &Member{r: r, w: w, g: g, slot: slot, begun: make(chan struct{}), stop: make(chan struct{}), endDone: make(chan struct{}), close: closeLetters,
		unshow: r.showMetrics(r.hostedTasks(slot), nil, true)}
	subject := barrierSubject(topo.Name)
	m.sub, err = w.nc.Subscribe(subject, m.onBarrier)
	if err == nil {
		err = w.nc.Flush()
	}
	if err != nil {
		m.Crash()
		return nil, fmt.Errorf("workers: generation %d: cannot subscribe to %s: %w", g.Number, subject, err)
	}
	if moved {
		m.announceMove()
	}
	if cfg.figures != nil {
		cfg.figures.joined(m)
	}
	m.wg.Add(1)
	go m.announce(subject)
	r.log.Info().Uint64("generation", g.Number).Int("slot", slot).Uint64("incarnation", g.incarnation(slot)).Uint64("restore_from", restoreFrom).Str("placement", p.describe()).Msg("joined a generation")
	return m, nil
}

// announceMove tells the other slots, once this one has subscribed, that
// the slot has a new owner: they fence the previous owner's records, and
// their spouts replay the trees in flight at once. Were the notice lost, the records would still be fenced
// (the runners see the amended generation) and the trees replayed when
// they time out.
func (m *Member) announceMove() {
	var at time.Time
	if m.slot < len(m.g.DiedAt) {
		at = m.g.DiedAt[m.slot]
	}
	if at.IsZero() {
		at = time.Now()
	}
	epoch := m.w.incarnation
	crash := int64(epoch<<8) ^ int64(m.slot) // one ID per move, for the recovery accounting
	msg := fmt.Sprintf("dead %d %d %d %d %d", m.slot, epoch, crash, at.UnixNano(), m.g.Number)
	m.w.nc.Publish(m.r.ctlSubject, []byte(msg))
	m.w.nc.Flush()
}

// fenceSlot raises what the member's tasks take as the newest epoch of
// slot: records of an earlier owner of the slot are dropped from now on.
func (m *Member) fenceSlot(slot int, epoch uint64) { m.w.raiseEpoch(slot, epoch) }

// restoreEpoch loads checkpoint epoch for the tasks to restore (0: none).
func (r *run) restoreEpoch(ctx context.Context, epoch uint64) error {
	r.store = r.cfg.Checkpoints
	if epoch == 0 {
		return nil
	}
	rest, err := checkpoint.Load(ctx, r.store, r.plan.topo.Name, epoch, r.plan.fingerprint())
	if err != nil {
		return fmt.Errorf("workers: generation %d cannot restore checkpoint %d: %w", r.gen, epoch, err)
	}
	if err := r.plan.checkRescale(rest.Manifest); err != nil {
		return err
	}
	r.restore = rest
	return nil
}

// announce says "ready" every announceEvery until the leader says
// "begin", then every second: a leader elected later learns from it that
// the generation runs, and begins its checkpoints. A leader that starts
// after the first "ready" (its subscription was not yet live) asks for
// another at once ("call", onBarrier) rather than wait for the next.
func (m *Member) announce(subject string) {
	defer m.wg.Done()
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	begun := m.begun
	for {
		m.w.nc.Publish(subject, m.ready())
		select {
		case <-begun:
			t.Reset(time.Second)
			begun = nil
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// ready is the member's "ready <generation> <slot> <incarnation>".
func (m *Member) ready() []byte {
	return fmt.Appendf(nil, "ready %d %d %d", m.g.Number, m.slot, m.g.incarnation(m.slot))
}

// announceEvery is how often a member that has not begun says "ready".
var announceEvery = 100 * time.Millisecond

func (m *Member) onBarrier(msg *nats.Msg) {
	f := strings.Fields(string(msg.Data))
	if len(f) != 2 || f[0] != "begin" && f[0] != "end" && f[0] != "call" {
		return
	}
	if gen, err := strconv.ParseUint(f[1], 10, 64); err != nil || gen != m.g.Number {
		return
	}
	if f[0] == "call" {
		// A leader that has just started asks who is ready.
		m.w.nc.Publish(msg.Subject, m.ready())
		return
	}
	if f[0] == "end" {
		// The leader ends a generation without checkpoints: the tasks stop
		// gracefully, so that sinks commit, and "ended" tells it when.
		go m.Stop()
		return
	}
	m.once.Do(func() {
		if m.ended.Load() {
			return
		}
		m.w.begin()
		close(m.begun)
	})
}

// Generation is the generation the member runs; Slot its slot in it.
func (m *Member) Generation() Generation { return m.g }
func (m *Member) Slot() int              { return m.slot }

// Begun is closed when the member's tasks have begun.
func (m *Member) Begun() <-chan struct{} { return m.begun }

// Failed is closed when a task cannot go on (a spout or bolt that cannot
// start, or a checkpoint that cannot be restored); Err says why.
func (m *Member) Failed() <-chan struct{} { return m.r.aborted }
func (m *Member) Err() error {
	if m.r.isAborted() {
		return m.r.abortErr
	}
	return nil
}

// Stop ends the member's tasks gracefully: they finish what they hold and
// run Cleanup and Close.
func (m *Member) Stop() { m.end(false) }

// Crash ends the member's tasks at once, as a dead process would: nothing
// they hold is finished, and the next generation restores their state
// from its checkpoint.
func (m *Member) Crash() { m.end(true) }

func (m *Member) end(crash bool) {
	if m.ended.Swap(true) {
		<-m.endDone
		return
	}
	defer close(m.endDone)
	close(m.stop)
	m.once.Do(func() {}) // a late "begin" starts nothing
	if crash {
		m.w.crash()
		m.w.wg.Wait()
	} else {
		m.w.stopTasks()
		// Their Cleanup has run: a leader ending the generation (End)
		// waits for this.
		m.w.nc.Publish(barrierSubject(m.r.plan.topo.Name), []byte(fmt.Sprintf("ended %d %d %d", m.g.Number, m.slot, m.g.incarnation(m.slot))))
		m.w.nc.FlushTimeout(time.Second)
		m.w.nc.Close()
	}
	m.wg.Wait()
	m.unshow()
	m.close()
	if f := m.r.cfg.figures; f != nil {
		f.ended(m)
	}
}

// TaskStatus is one task as its worker sees it.
type TaskStatus struct {
	Task      int    `json:"task"`
	Component string `json:"component"`
	Index     int    `json:"index"`
	// Queue is the frames waiting in the task's inboxes.
	Queue int `json:"queue"`
	// Pending (spouts) is the trees in flight or waiting to be replayed;
	// Exhausted says the source is done.
	Pending   int64 `json:"pending,omitempty"`
	Exhausted bool  `json:"exhausted,omitempty"`
	Spout     bool  `json:"spout,omitempty"`
	// Capacity (bolts) is the fraction of the last second the task spent
	// processing inputs, as ackflow_capacity_ratio shows it.
	Capacity float64 `json:"capacity,omitempty"`
}

// MemberStatus is what a member reports of itself.
type MemberStatus struct {
	Generation uint64       `json:"generation"`
	Slot       int          `json:"slot"`
	Begun      bool         `json:"begun"`
	Tasks      []TaskStatus `json:"tasks"`
	// Records is how many records the member's tasks emitted, replays
	// included; FencedFrames how many frames of another generation it
	// dropped; DeadLettered how many roots its spouts gave up on.
	Records      int64 `json:"records"`
	FencedFrames int64 `json:"fenced_frames"`
	DeadLettered int64 `json:"dead_lettered"`
	// Unprocessed is the records the member's tasks sent less those its
	// tasks processed or dropped (from any member): summed over the
	// members of a generation, the records in flight.
	Unprocessed int64 `json:"unprocessed"`
	// Components are the member's tasks' figures in this generation, per
	// component (the status page adds them up over the members), and
	// Transport its workers' loss and flow-control counters.
	Components []ComponentStatus `json:"components,omitempty"`
	Transport  TransportStatus   `json:"transport"`
}

// add adds b, the status of another slot of the same worker process in
// the same generation (a slot that moved to it), to st.
func (st *MemberStatus) add(b MemberStatus) {
	st.Begun = st.Begun && b.Begun
	st.Tasks = append(st.Tasks, b.Tasks...)
	st.Records += b.Records
	st.FencedFrames += b.FencedFrames
	st.DeadLettered += b.DeadLettered
	st.Unprocessed += b.Unprocessed
	st.Components = append(st.Components, b.Components...)
	st.Transport.add(b.Transport)
}

// Status reports the member's tasks.
func (m *Member) Status() MemberStatus {
	r := m.r
	st := MemberStatus{Generation: m.g.Number, Slot: m.slot, Records: r.records(), FencedFrames: r.tc.fencedFrames.Load(), Unprocessed: r.inFlight()}
	select {
	case <-m.begun:
		st.Begun = true
	default:
	}
	for _, c := range r.counters {
		if c != nil {
			st.DeadLettered += c.deadLettered.Load()
		}
	}
	var hosted []int
	for i, t := range m.w.tasks {
		if t == nil {
			continue
		}
		st.Tasks = append(st.Tasks, r.taskStatus(i, t))
		if t.info.comp != nil {
			hosted = append(hosted, i)
		}
	}
	st.Components, st.Transport = r.componentStatus(hosted), r.transportStatus()
	return st
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
