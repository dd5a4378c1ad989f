package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ackflow/ackflow/topology"
)

// The states of a submitted topology.
const (
	StateRunning = "running" // its workers run it
	StateKilling = "killing" // its workers are stopping it
	// StateFinishing: its sources are exhausted and every record is
	// processed, and its workers are stopping its tasks (a topology
	// without checkpoints, whose sinks commit as their tasks stop).
	StateKilled    = "killed"   // stopped; the name may be submitted again
	StateFinished  = "finished" // its sources are exhausted and every record processed; the name may be submitted again
	StateFailed    = "failed"   // its tasks failed FailAfter times in a row (Error says why); the name may be submitted again
	StateFinishing = "finishing"
)

// Spec is a submitted topology. Its code is compiled into every worker
// binary; the submission holds only its name and settings.
type Spec struct {
	Name      string `json:"name"`
	Guarantee string `json:"guarantee"`
	// Parallelism overrides the parallelism of components, by name.
	Parallelism map[string]int `json:"parallelism,omitempty"`
	// Settings are the --set key=value pairs, for the topology's builder.
	Settings map[string]string `json:"settings,omitempty"`
	// CheckpointEvery is the checkpoint interval (0: the workers'
	// default, every second in cluster mode).
	CheckpointEvery time.Duration `json:"checkpoint_every_ns,omitempty"`
	// NoCheckpoints runs an at-least-once topology without checkpoints
	// (at-most-once never takes any): a worker's death then moves its
	// tasks to other workers without their state.
	NoCheckpoints bool `json:"no_checkpoints,omitempty"`
	// FailAfter makes the topology fail (StateFailed) when its tasks fail
	// that many times in a row, each within a minute of the one before
	// (a spout or bolt that cannot start or go on); 0 starts a new
	// generation after every failure, with a growing pause.
	FailAfter int `json:"fail_after,omitempty"`
	// Error is why the topology failed.
	Error string `json:"error,omitempty"`
	// Resume makes the first generation restore the latest checkpoint of
	// an earlier submission of the topology, instead of starting afresh.
	Resume bool `json:"resume,omitempty"`
	// LogLevel, when set, is the log level of the topology on every
	// worker (debug, info, warn or error), instead of the workers' own;
	// ackflow loglevel sets it while the topology runs.
	LogLevel  string    `json:"log_level,omitempty"`
	State     string    `json:"state"`
	Submitted time.Time `json:"submitted"`
	// LastCheckpoint is, once the topology is killed or finished, the
	// epoch of its final checkpoint (0: none), which submit --resume
	// continues from.
	LastCheckpoint uint64 `json:"last_checkpoint,omitempty"`
}

// SpecEvent is a change of the registry. A deleted topology's event has
// Deleted set and only Spec.Name.
type SpecEvent struct {
	Spec    Spec
	Rev     uint64
	Deleted bool
}

// Registry holds the submitted topologies.
type Registry interface {
	// Submit adds spec in state running (an empty State means running;
	// a zero Submitted means now). It refuses a name that is running or
	// being killed (ErrExists); a killed or finished one is replaced.
	Submit(ctx context.Context, spec Spec) error
	// Get returns the topology's spec and its revision, or ErrNotFound.
	Get(ctx context.Context, name string) (Spec, uint64, error)
	// Update replaces the spec if its revision is still rev and returns the
	// new revision; ErrConflict if it changed, ErrNotFound if it was
	// deleted.
	Update(ctx context.Context, spec Spec, rev uint64) (uint64, error)
	// List returns every spec, by name. An entry that is not a spec (no
	// ackflow program wrote it) is left out, and the error, which wraps
	// ErrInvalidEntry, names it while the valid specs are returned too.
	List(ctx context.Context) ([]Spec, error)
	// Delete removes the topology; a missing one is not an error.
	Delete(ctx context.Context, name string) error
	// Watch sends an event for every spec there is, then one for every
	// change, until ctx ends; then it closes the channel. It closes it
	// earlier if the watch breaks: a receiver that sees it closed while ctx
	// is live watches again.
	Watch(ctx context.Context) (<-chan SpecEvent, error)
}

// KVRegistry is a Registry in the JetStream KV bucket ackflow_topologies,
// one key per topology.
type KVRegistry struct {
	*registry
}

// NewKVRegistry opens the topologies bucket, creating it if needed. The
// caller keeps ownership of js and its connection.
func NewKVRegistry(ctx context.Context, js jetstream.JetStream, opts ...Option) (*KVRegistry, error) {
	b, err := openKVBucket(ctx, js, jetstream.KeyValueConfig{Bucket: TopologiesBucket, Description: "ackflow submitted topologies"}, opts)
	if err != nil {
		return nil, err
	}
	return &KVRegistry{&registry{b: b}}, nil
}

// MemoryRegistry is a Registry in memory, for local mode and tests.
type MemoryRegistry struct {
	*registry
}

// NewMemoryRegistry returns an empty MemoryRegistry.
func NewMemoryRegistry() *MemoryRegistry {
	return &MemoryRegistry{&registry{b: newMemBucket(0)}}
}

// registry is a Registry over a bucket.
type registry struct {
	b bucket
}

func (r *registry) Submit(ctx context.Context, spec Spec) error {
	if spec.State == "" {
		spec.State = StateRunning
	}
	if spec.State != StateRunning {
		return fmt.Errorf("cluster: topology %s is submitted in state %q; a submission is %q (leave State empty)", spec.Name, spec.State, StateRunning)
	}
	if spec.Submitted.IsZero() {
		spec.Submitted = time.Now()
	}
	value, err := encodeSpec(spec)
	if err != nil {
		return err
	}
	_, err = r.b.create(ctx, spec.Name, value)
	if errors.Is(err, errKeyExists) {
		return r.replaceKilled(ctx, spec.Name, value)
	}
	if err != nil {
		return fmt.Errorf("cluster: cannot submit topology %s to %s: %w; check the NATS connection and retry", spec.Name, r.b.where(), err)
	}
	return nil
}

// replaceKilled submits over a topology of the same name if it has
// stopped: killed, finished or failed.
func (r *registry) replaceKilled(ctx context.Context, name string, value []byte) error {
	old, rev, err := r.Get(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: topology %s was deleted while it was submitted; submit it again", ErrConflict, name)
	}
	if err != nil {
		return err
	}
	if old.State != StateKilled && old.State != StateFinished && old.State != StateFailed {
		return fmt.Errorf("%w: topology %s is %s (submitted %s); kill it first, or submit under another name",
			ErrExists, name, old.State, old.Submitted.Format(time.RFC3339))
	}
	if _, err := r.b.update(ctx, name, value, rev); err != nil {
		return r.writeError(ctx, name, rev, err)
	}
	return nil
}

func (r *registry) Get(ctx context.Context, name string) (Spec, uint64, error) {
	if err := checkName("topology", name); err != nil {
		return Spec{}, 0, err
	}
	e, err := r.b.get(ctx, name)
	if errors.Is(err, errNoKey) {
		return Spec{}, 0, fmt.Errorf("%w: no topology %s in %s; submit it first (ackflow submit %s)", ErrNotFound, name, r.b.where(), name)
	}
	if err != nil {
		return Spec{}, 0, fmt.Errorf("cluster: cannot read topology %s in %s: %w; check the NATS connection and retry", name, r.b.where(), err)
	}
	spec, err := r.decode(e)
	return spec, e.rev, err
}

func (r *registry) Update(ctx context.Context, spec Spec, rev uint64) (uint64, error) {
	if rev == 0 {
		return 0, fmt.Errorf("cluster: update of topology %s without a revision; read it with Get first, or use Submit for a new one", spec.Name)
	}
	value, err := encodeSpec(spec)
	if err != nil {
		return 0, err
	}
	newRev, err := r.b.update(ctx, spec.Name, value, rev)
	if err != nil {
		return 0, r.writeError(ctx, spec.Name, rev, err)
	}
	return newRev, nil
}

// writeError explains a failed compare-and-set of name at rev.
func (r *registry) writeError(ctx context.Context, name string, rev uint64, err error) error {
	if !errors.Is(err, errRevMismatch) {
		return fmt.Errorf("cluster: cannot write topology %s in %s: %w; check the NATS connection and retry", name, r.b.where(), err)
	}
	if _, getErr := r.b.get(ctx, name); errors.Is(getErr, errNoKey) {
		return fmt.Errorf("%w: topology %s was deleted after revision %d; submit it again", ErrNotFound, name, rev)
	}
	return fmt.Errorf("%w: topology %s changed after revision %d (another operator or worker wrote it); read it again with Get, and retry", ErrConflict, name, rev)
}

func (r *registry) List(ctx context.Context) ([]Spec, error) {
	entries, err := r.b.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot list topologies in %s: %w; check the NATS connection and retry", r.b.where(), err)
	}
	specs := make([]Spec, 0, len(entries))
	var invalid []string
	for _, e := range entries {
		spec, err := r.decode(e)
		if err != nil {
			invalid = append(invalid, e.key)
			continue
		}
		specs = append(specs, spec)
	}
	slices.SortFunc(specs, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	if len(invalid) > 0 {
		slices.Sort(invalid)
		return specs, fmt.Errorf("%w: %s in %s: not topologies that ackflow submitted; left out (delete them with the nats CLI: nats kv del %s KEY)",
			ErrInvalidEntry, strings.Join(invalid, ", "), r.b.where(), TopologiesBucket)
	}
	return specs, nil
}

func (r *registry) Delete(ctx context.Context, name string) error {
	if err := checkName("topology", name); err != nil {
		return err
	}
	if err := r.b.delete(ctx, name, 0); err != nil {
		return fmt.Errorf("cluster: cannot delete topology %s in %s: %w; check the NATS connection and retry", name, r.b.where(), err)
	}
	return nil
}

// Watch leaves out the deletions among the initial entries (a deleted
// key's marker stays in the bucket) and entries that are not specs (List
// reports those).
func (r *registry) Watch(ctx context.Context) (<-chan SpecEvent, error) {
	events, err := r.b.watch(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot watch topologies in %s: %w; check the NATS connection and retry", r.b.where(), err)
	}
	out := make(chan SpecEvent)
	ready := false
	go relay(ctx, events, out, func(ev event) []SpecEvent {
		switch {
		case ev.initDone:
			ready = true
		case ev.deleted && ready:
			return []SpecEvent{{Spec: Spec{Name: ev.key}, Rev: ev.rev, Deleted: true}}
		case !ev.deleted:
			if spec, err := r.decode(ev.entry); err == nil {
				return []SpecEvent{{Spec: spec, Rev: ev.rev}}
			}
		}
		return nil
	})
	return out, nil
}

// decode reads a spec and checks it as Submit checks what it writes: an
// entry written by something else (a hand-edited key, another version) is
// refused with a reason rather than half understood.
func (r *registry) decode(e entry) (Spec, error) {
	var spec Spec
	err := json.Unmarshal(e.value, &spec)
	if err == nil {
		err = checkSpec(spec)
	}
	if err == nil && spec.Name != e.key {
		err = fmt.Errorf("it names topology %q", spec.Name)
	}
	if err != nil {
		return Spec{}, fmt.Errorf("cluster: entry %s in %s is not a valid topology spec: %w; delete it and submit the topology again", e.key, r.b.where(), err)
	}
	return spec, nil
}

// checkParallelism refuses parallelism outside 1..topology.MaxParallelism.
func checkParallelism(what, topo string, parallelism map[string]int) error {
	for component, n := range parallelism {
		if n < 1 || n > topology.MaxParallelism {
			return fmt.Errorf("cluster: %s of topology %s sets the parallelism of %s to %d; use 1 to %d", what, topo, component, n, topology.MaxParallelism)
		}
	}
	return nil
}

func encodeSpec(spec Spec) ([]byte, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	value, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("cluster: spec of topology %s cannot be encoded: %w", spec.Name, err)
	}
	return value, nil
}

func checkSpec(spec Spec) error {
	if err := checkName("topology", spec.Name); err != nil {
		return err
	}
	if spec.Guarantee == "" {
		return fmt.Errorf("cluster: spec of topology %s has no guarantee; set at-most-once, at-least-once or exactly-once", spec.Name)
	}
	switch spec.State {
	case StateRunning, StateKilling, StateKilled, StateFinishing, StateFinished, StateFailed:
	default:
		return fmt.Errorf("cluster: spec of topology %s has state %q; use %q, %q, %q, %q, %q or %q", spec.Name, spec.State, StateRunning, StateKilling, StateKilled, StateFinishing, StateFinished, StateFailed)
	}
	if err := checkParallelism("spec", spec.Name, spec.Parallelism); err != nil {
		return err
	}
	switch spec.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("cluster: spec of topology %s has log level %q; use debug, info, warn or error", spec.Name, spec.LogLevel)
	}
	switch {
	case spec.FailAfter < 0:
		return fmt.Errorf("cluster: spec of topology %s has FailAfter %d; use 0 to retry for good, or a positive count", spec.Name, spec.FailAfter)
	case spec.CheckpointEvery < 0:
		return fmt.Errorf("cluster: spec of topology %s has a negative checkpoint interval %v; use 0 for the default, or NoCheckpoints for none", spec.Name, spec.CheckpointEvery)
	case spec.NoCheckpoints && spec.CheckpointEvery > 0:
		return fmt.Errorf("cluster: spec of topology %s has a checkpoint interval %v and NoCheckpoints; choose one", spec.Name, spec.CheckpointEvery)
	}
	return nil
}
