package workers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// NodeConfig configures a worker process of a cluster (RunNode).
type NodeConfig struct {
	// Name names the worker in the cluster; two live workers cannot share
	// one. Default: the host name and process ID.
	Name    string
	NATSURL string
	// Topologies are the topologies this binary can run, by name: each
	// builds its topology from a submission's settings. A worker runs the
	// tasks of every submitted topology it has.
	Topologies map[string]func(settings map[string]string) (*topology.Topology, error)
	// Runtime is the base runtime configuration; a submission sets the
	// guarantee, the parallelism and the checkpoint interval.
	Runtime Config
	// Members is the cluster's liveness timing (default: heartbeats every
	// second, dead after three).
	Members cluster.MembersConfig
	// Replicas is how many copies the cluster's buckets and checkpoint
	// stores keep on the servers of a NATS cluster (0: one for a bucket
	// this worker creates; an existing bucket keeps its own).
	Replicas int
	// StatusEvery is how often the worker reports its tasks (default
	// 500ms): `ackflow status` shows the reports, and the leader ends a
	// topology whose sources are exhausted from them.
	StatusEvery time.Duration
	// Place, if set, decides where a new generation puts the tasks: it
	// gets every task and the eligible workers' names, sorted, and returns
	// the worker of every task ID. Nil spreads them by rendezvous hashing,
	// which moves as few as possible when a worker joins or leaves. The
	// leader refuses a placement that leaves a task out or names another
	// worker (it logs why and places by rendezvous hashing). Only the
	// leader's Place counts; give every worker the same one.
	Place func(tasks []TaskRef, workers []string) map[int]string
	// Memory, if set, is the cluster this worker coordinates through,
	// in memory, instead of the KV buckets on its NATS server: every
	// worker of the cluster runs in this process (tests, and local mode's
	// control plane). Records still travel over NATS. With Memory, a
	// Runtime.Checkpoints store shared by the workers is their checkpoint
	// store, as the object store bucket of each topology is otherwise.
	Memory *cluster.MemoryCluster

	// named is the topology Runtime.Logger already names (a local run's
	// nodes, whose every line names the run's topology): its runner does
	// not name it again, which would write the key twice.
	named string
	// opened, if set, is given the worker's coordination handles once
	// they are bound (a local run's tests pause a node's heartbeats).
	opened func(cluster.Coordination)
	// quietEvery, if set, lets a report that says nothing new to the
	// leader (quietKey) wait this long rather than go out every
	// StatusEvery: a local run's nodes report every 5 ms so that a run
	// ends soon after its last record, and building, encoding and reading
	// 200 reports a second per node was 1-4% of word count's CPU.
	quietEvery time.Duration
}

// SpecConfig turns a submission into the runtime configuration of its
// topology. A submission's checkpoint interval of 0 means every second
// in cluster mode, unless it runs without checkpoints (NoCheckpoints, or
// at-most-once, which cannot take any).
func SpecConfig(base Config, spec cluster.Spec) (Config, error) {
	cfg := base
	g, err := ParseGuarantee(spec.Guarantee)
	if err != nil {
		return cfg, err
	}
	cfg.Guarantee, cfg.Parallelism = g, maps.Clone(spec.Parallelism)
	switch {
	case spec.CheckpointEvery > 0:
		cfg.CheckpointEvery = spec.CheckpointEvery
	case spec.NoCheckpoints || g == AtMostOnce:
		cfg.CheckpointEvery = 0
	case cfg.CheckpointEvery == 0:
		cfg.CheckpointEvery = time.Second
	}
	switch {
	case g == ExactlyOnce && cfg.CheckpointEvery == 0:
		return cfg, errors.New("exactly-once needs checkpoints; submit it with a checkpoint interval")
	case spec.Resume && cfg.CheckpointEvery == 0:
		return cfg, errors.New("resume continues from a checkpoint, and this submission takes none")
	}
	return cfg, nil
}

// errNodeCrash, as the cause of the context of RunNode, ends the node as
// a killed process ends: its tasks stop at once, its NATS connection
// closes, and it does not leave the membership (in-process crash chaos).
var errNodeCrash = errors.New("workers: node crashed (chaos)")

// Node is a worker process of a cluster: it joins the membership, runs
// its part of every submitted topology it has, and leads those it wins
// the election of.
type Node struct {
	cfg      NodeConfig
	log      zerolog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	members  cluster.Members
	registry cluster.Registry
	gens     cluster.Generations
	elector  cluster.Elector
	statuses cluster.Statuses
	// positions hold the positions of spouts without checkpoints
	// (spoutPositions).
	positions cluster.Positions
	// prints are the fingerprints of this binary's topologies built
	// without settings, which the members list advertises.
	prints map[string]string

	mu      sync.Mutex
	runners map[string]*runner
	wg      sync.WaitGroup
}

// RunNode runs a worker process until ctx ends: then it leaves the
// cluster, and the others take its tasks over.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = defaultName(host, os.Getpid())
	}
	if cfg.StatusEvery <= 0 {
		cfg.StatusEvery = 500 * time.Millisecond
	}
	if err := cfg.Members.Validate(); err != nil {
		return err
	}
	if cfg.Memory != nil && cfg.Runtime.Checkpoints == nil {
		return errors.New("workers: the workers of an in-memory cluster need a checkpoint store they share (Runtime.Checkpoints, for example checkpoint.NewMemory())")
	}
	n := &Node{cfg: cfg, log: cfg.Runtime.Logger.With().Str("worker", cfg.Name).Logger(), runners: map[string]*runner{}, prints: map[string]string{}}
	var err error
	opts := append([]nats.Option{nats.Name("ackflow worker " + cfg.Name), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, cfg.Runtime.NATSOptions...)
	n.nc, err = nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("workers: cannot connect to NATS at %s: %w", cfg.NATSURL, err)
	}
	defer n.nc.Close()
	if n.js, err = jetstream.New(n.nc); err != nil {
		return err
	}
	if err := n.open(ctx); err != nil {
		return err
	}
	for name, build := range cfg.Topologies {
		if topo, err := build(nil); err == nil {
			n.prints[name] = Fingerprint(topo)
		}
	}
	if err := n.join(ctx); err != nil {
		return err
	}
	// Only once joined: while this process waits for its name, the entry
	// under it is a dead process's, and an answer here would make the
	// leaders take that one for alive (and give it tasks).
	if err := n.answerPresence(); err != nil {
		return fmt.Errorf("workers: cannot subscribe to %s: %w", n.presenceSubject(n.cfg.Name), err)
	}
	n.log.Info().Strs("topologies", slices.Sorted(maps.Keys(cfg.Topologies))).Msg("joined the cluster")
	err = n.watchRegistry(ctx)
	n.stopRunners()
	if errors.Is(context.Cause(ctx), errNodeCrash) {
		// Crash chaos in an in-process cluster: like a killed process, the
		// node does not leave; its entry expires.
		return nil
	}
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if lerr := n.members.Leave(lctx, cfg.Name); lerr != nil {
		n.log.Warn().Err(lerr).Msg("cannot leave the cluster; the others notice when its entry expires")
	}
	return err
}

// open binds the cluster's buckets, or the in-memory cluster's entries.
func (n *Node) open(ctx context.Context) error {
	mc := n.cfg.Members
	mc.OnLost = func(m cluster.Member, err error) {
		n.log.Error().Err(err).Msg("this worker was taken for dead and its name reused; stopping its tasks")
		n.stopRunners()
	}
	mc.OnInvalid = func(key string) {
		// One line per write of such an entry, by whoever writes it.
		n.log.Warn().Str("key", key).Str("bucket", cluster.MembersBucket).Msg("an entry that is not a worker's heartbeat is in the members bucket; left out of the members (delete it with nats kv del)")
	}
	var c cluster.Coordination
	var err error
	if n.cfg.Memory != nil {
		c, err = n.cfg.Memory.Open(mc)
	} else {
		var opts []cluster.Option
		if n.cfg.Replicas > 0 {
			opts = append(opts, cluster.Replicas(n.cfg.Replicas))
		}
		c, err = cluster.OpenKV(ctx, n.js, mc, opts...)
	}
	if err != nil {
		return err
	}
	n.members, n.registry, n.gens, n.elector, n.statuses, n.positions = c.Members, c.Registry, c.Generations, c.Elector, c.Statuses, c.Positions
	if n.cfg.opened != nil {
		n.cfg.opened(c)
	}
	return nil
}

// join registers the worker, waiting for its name to free itself if a
// dead worker of that name has not expired yet.
func (n *Node) join(ctx context.Context) error {
	host, _ := os.Hostname()
	m := cluster.Member{Name: n.cfg.Name, Host: host, PID: os.Getpid(), Topologies: n.prints}
	warned := false
	for {
		err := n.members.Join(ctx, m)
		if err == nil || !errors.Is(err, cluster.ErrNameTaken) {
			return err
		}
		if !warned {
			n.log.Warn().Err(err).Msg("waiting for the name to free itself")
			warned = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(n.cfg.Members.HeartbeatEvery):
		}
	}
}

// watchRegistry starts a runner for every submitted topology this binary
// has and hands it every change of its submission.
func (n *Node) watchRegistry(ctx context.Context) error {
	for ctx.Err() == nil {
		events, err := n.registry.Watch(ctx)
		if err != nil {
			n.log.Warn().Err(err).Msg("cannot watch the submitted topologies; retrying")
			sleepCtx(ctx, time.Second)
			continue
		}
		for ev := range events {
			n.onSpec(ctx, ev)
		}
	}
	return nil
}

func (n *Node) onSpec(ctx context.Context, ev cluster.SpecEvent) {
	name := ev.Spec.Name
	n.mu.Lock()
	r := n.runners[name]
	n.mu.Unlock()
	if r == nil {
		if ev.Deleted || !live(ev.Spec.State) {
			return
		}
		build, ok := n.cfg.Topologies[name]
		if !ok {
			n.log.Warn().Str("topology", name).Msg("a topology this binary does not have was submitted; its tasks go to workers that have it")
			return
		}
		r = newRunner(n, name, build)
		n.mu.Lock()
		n.runners[name] = r
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			r.run(ctx)
		}()
	}
	r.setSpec(ev)
}

// live reports whether a topology in state is to be run.
func live(state string) bool {
	return state == cluster.StateRunning || state == cluster.StateKilling || state == cluster.StateFinishing
}

// stopRunners ends every runner's work and waits for them.
func (n *Node) stopRunners() {
	n.mu.Lock()
	rs := slices.Collect(maps.Values(n.runners))
	n.mu.Unlock()
	for _, r := range rs {
		r.close()
	}
}

// defaultName makes a worker name of the host name and process ID, in
// the characters names allow.
func defaultName(host string, pid int) string {
	b := []byte(fmt.Sprintf("%s-%d", host, pid))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	return string(b)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Report is what a worker publishes about its part of a topology.
type Report struct {
	Member     string `json:"member"`
	Generation uint64 `json:"generation"`
	Error      string `json:"error,omitempty"`
	// Failed is the generation this worker's tasks failed in (Error says
	// why): the leader starts the next one.
	Failed uint64 `json:"failed_generation,omitempty"`
	// Superseded says the worker could not join generation Failed because
	// the checkpoint it restores is gone: newer ones replaced it while the
	// worker was away (it crashed and came back after the generation had
	// begun). The leader starts the next generation without counting a
	// failure of the topology's tasks (Spec.FailAfter).
	Superseded   bool          `json:"superseded,omitempty"`
	Status       *MemberStatus `json:"status,omitempty"`
	Leader       bool          `json:"leader,omitempty"`
	Checkpoint   uint64        `json:"checkpoint,omitempty"` // leader: latest complete epoch
	Updated      time.Time     `json:"updated"`
	RestoredFrom uint64        `json:"restored_from,omitempty"`
}

// encodeReport is Report as the statuses bucket holds it.
func encodeReport(topo string, r Report) cluster.Report {
	data, _ := json.Marshal(r)
	return cluster.Report{Topology: topo, Member: r.Member, Data: data}
}

// DecodeReport reads a report from the statuses bucket.
func DecodeReport(r cluster.Report) (Report, error) {
	var rep Report
	err := json.Unmarshal(r.Data, &rep)
	return rep, err
}

// checkpointStore opens the topology's checkpoint bucket; an in-memory
// cluster's workers share the runtime's store instead.
func (n *Node) checkpointStore(ctx context.Context, topo string) (checkpoint.Store, error) {
	if n.cfg.Memory != nil {
		return n.cfg.Runtime.Checkpoints, nil
	}
	bucket, err := checkpoint.BucketName(topo)
	if err != nil {
		return nil, err
	}
	var opts []checkpoint.ObjectStoreOption
	if n.cfg.Replicas > 0 {
		opts = append(opts, checkpoint.Replicas(n.cfg.Replicas))
	}
	s, err := checkpoint.NewObjectStore(ctx, n.js, bucket, opts...)
	if err != nil {
		// A nil *ObjectStore in a Store would look open to the caller.
		return nil, err
	}
	return s, nil
}

// presenceSubject is where a worker answers "are you there?". When its
// process dies, its connection closes and the server drops the
// subscription at once, so a request there gets "no responders": a
// leader learns of a killed worker in a fraction of a second instead of
// when its membership entry expires. A paused worker still holds its
// subscription; only the expiry of its entry tells of it. The workers of
// an in-memory cluster (a local run: worker-0, worker-1...) answer under
// its ID, so that another local run on the same server does not answer
// for them.
func (n *Node) presenceSubject(member string) string {
	if n.cfg.Memory != nil {
		return "ackflow.presence." + n.cfg.Memory.ID() + "." + member
	}
	return "ackflow.presence." + member
}

// answerPresence subscribes the worker's presence subject.
func (n *Node) answerPresence() error {
	_, err := n.nc.Subscribe(n.presenceSubject(n.cfg.Name), func(m *nats.Msg) { m.Respond(nil) })
	if err == nil {
		err = n.nc.Flush()
	}
	return err
}
