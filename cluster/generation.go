package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Generation is what every worker runs of a topology until the next one: the
// plan, the worker of every task, and the checkpoint epoch to restore.
type Generation struct {
	Topology string `json:"topology"`
	// Number is the fencing epoch carried in every frame, strictly
	// increasing per topology: receivers drop frames of another
	// generation. The first generation is 1.
	Number uint64 `json:"number"`
	// Parallelism is the effective parallelism of every component.
	Parallelism map[string]int `json:"parallelism"`
	// Assignment maps each task ID to the member that runs it.
	Assignment map[int]string `json:"assignment"`
	// RestoreFrom is the checkpoint epoch the tasks restore (0: none).
	RestoreFrom uint64 `json:"restore_from"`
	// Floor is the newest checkpoint epoch of earlier submissions of the
	// topology: no generation of this submission restores it or one
	// before it (a submission without resume that loses a worker before
	// its own first checkpoint starts its sources over). Every generation
	// of a submission carries the first one's.
	Floor   uint64    `json:"floor,omitempty"`
	Leader  string    `json:"leader"`
	Created time.Time `json:"created"`
	// Reason says why it was made: "submitted", "member w2 left",
	// "rebalance"...
	Reason string `json:"reason"`
	// Fingerprint is the shape of the topology the leader planned with;
	// a worker whose build has another refuses to run the generation.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Moves are the slots that changed hands while the generation ran,
	// by the name of the member Assignment gives them to: that member
	// died, every task of its slot was stateless, and the leader gave the
	// slot to another member instead of rolling the topology back (Amend).
	// Assignment, and so the slots' numbering, never changes within a
	// generation.
	Moves map[string]Move `json:"moves,omitempty"`
}

// Move is a slot of a generation run by another member than Assignment
// says.
type Move struct {
	// To is the member that runs the slot now.
	To string `json:"to"`
	// Incarnation counts the slot's owners in this generation: the
	// member of Assignment is 0, the first move 1. Frames carry it beside
	// the generation number, so the tasks of an earlier owner are fenced.
	Incarnation uint64 `json:"incarnation"`
	// At is when the leader noticed the previous owner's death.
	At time.Time `json:"at"`
}

// Owner returns the member that runs the slot Assignment gives to member.
func (g Generation) Owner(member string) string {
	if m, ok := g.Moves[member]; ok {
		return m.To
	}
	return member
}

// Generations holds the current generation of each topology.
type Generations interface {
	// Current returns the topology's generation and its revision, or
	// ErrNotFound before the first.
	Current(ctx context.Context, topology string) (Generation, uint64, error)
	// Next writes g as the topology's next generation if the current one is
	// still at prevRev (0: none must exist) and returns the new revision.
	// g.Number must be the current Number+1 (1 for the first). ErrConflict
	// if another writer won.
	Next(ctx context.Context, g Generation, prevRev uint64) (uint64, error)
	// Amend writes g over the current generation, of the same number, if
	// it is still at prevRev: only g.Moves may differ. ErrConflict if
	// another writer won.
	Amend(ctx context.Context, g Generation, prevRev uint64) (uint64, error)
	// Watch sends the current generation, if there is one, then the new
	// ones, in order, until ctx ends; then it closes the channel. A
	// generation replaced before the watch sent it may be skipped (a KV
	// bucket keeps only a key's latest value), so a receiver acts on the
	// newest it has seen, which is what workers need. It closes it earlier
	// if the watch breaks: a receiver that sees it closed while ctx is live
	// watches again. Deletions are not sent.
	Watch(ctx context.Context, topology string) (<-chan Generation, error)
	// Delete forgets the topology's generations: a later first generation
	// is 1 again, so the runtime deletes only once no task of the topology
	// runs. A topology without a generation is not an error.
	Delete(ctx context.Context, topology string) error
}

// KVGenerations is Generations in the JetStream KV bucket
// ackflow_generations, one key per topology.
type KVGenerations struct {
	*generations
}

// NewKVGenerations opens the generations bucket, creating it if needed.
// The caller keeps ownership of js and its connection.
func NewKVGenerations(ctx context.Context, js jetstream.JetStream, opts ...Option) (*KVGenerations, error) {
	b, err := openKVBucket(ctx, js, jetstream.KeyValueConfig{Bucket: GenerationsBucket, Description: "ackflow generations of running topologies"}, opts)
	if err != nil {
		return nil, err
	}
	return &KVGenerations{&generations{b: b}}, nil
}

// MemoryGenerations is Generations in memory, for local mode and tests.
type MemoryGenerations struct {
	*generations
}

// NewMemoryGenerations returns an empty MemoryGenerations.
func NewMemoryGenerations() *MemoryGenerations {
	return &MemoryGenerations{&generations{b: newMemBucket(0)}}
}

// generations is Generations over a bucket.
type generations struct {
	b bucket

	// The last generation decoded per topology, by its revision: leaders
	// and workers read the current generation many times a second (a
	// local run's every 5 ms), and decoding its JSON each time was most of
	// the leader's work.
	mu      sync.Mutex
	decoded map[string]decodedGeneration
}

type decodedGeneration struct {
	rev uint64
	g   Generation
}

func (s *generations) Current(ctx context.Context, topology string) (Generation, uint64, error) {
	if err := checkName("topology", topology); err != nil {
		return Generation{}, 0, err
	}
	e, err := s.b.get(ctx, topology)
	if errors.Is(err, errNoKey) {
		return Generation{}, 0, fmt.Errorf("%w: topology %s has no generation in %s yet; its leader writes the first", ErrNotFound, topology, s.b.where())
	}
	if err != nil {
		return Generation{}, 0, fmt.Errorf("cluster: cannot read the generation of topology %s in %s: %w; check the NATS connection and retry", topology, s.b.where(), err)
	}
	s.mu.Lock()
	d, ok := s.decoded[topology]
	s.mu.Unlock()
	if ok && d.rev == e.rev {
		return d.g.clone(), e.rev, nil
	}
	g, err := s.decode(e)
	if err == nil {
		s.mu.Lock()
		if s.decoded == nil {
			s.decoded = map[string]decodedGeneration{}
		}
		s.decoded[topology] = decodedGeneration{rev: e.rev, g: g.clone()}
		s.mu.Unlock()
	}
	return g, e.rev, err
}

// clone copies g's maps, so that a caller may change what it got.
func (g Generation) clone() Generation {
	g.Parallelism, g.Assignment, g.Moves = maps.Clone(g.Parallelism), maps.Clone(g.Assignment), maps.Clone(g.Moves)
	return g
}

// Next reads the current generation to check g.Number against it; the
// compare-and-set on prevRev makes sure that what it read is still current
// when it writes.
func (s *generations) Next(ctx context.Context, g Generation, prevRev uint64) (uint64, error) {
	if err := checkGeneration(g); err != nil {
		return 0, err
	}
	if err := s.checkNumber(ctx, g, prevRev); err != nil {
		return 0, err
	}
	return s.write(ctx, g, prevRev)
}

// write stores g by compare-and-set on prevRev (0: the key must not exist).
func (s *generations) write(ctx context.Context, g Generation, prevRev uint64) (uint64, error) {
	value, err := json.Marshal(g)
	if err != nil {
		return 0, fmt.Errorf("cluster: generation %d of topology %s cannot be encoded: %w", g.Number, g.Topology, err)
	}
	var rev uint64
	if prevRev == 0 {
		rev, err = s.b.create(ctx, g.Topology, value)
	} else {
		rev, err = s.b.update(ctx, g.Topology, value, prevRev)
	}
	if errors.Is(err, errKeyExists) || errors.Is(err, errRevMismatch) {
		return 0, s.conflict(g, prevRev)
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: cannot write generation %d of topology %s in %s: %w; check the NATS connection, then read the current generation and retry", g.Number, g.Topology, s.b.where(), err)
	}
	return rev, nil
}

// Amend writes g over the topology's current generation, of the same
// number, if it is still at prevRev: a move of slots within a running
// generation (Generation.Moves). Only Moves may differ, and a slot's
// incarnation may only grow. ErrConflict if another writer won.
func (s *generations) Amend(ctx context.Context, g Generation, prevRev uint64) (uint64, error) {
	if err := checkGeneration(g); err != nil {
		return 0, err
	}
	prev, rev, err := s.Current(ctx, g.Topology)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidEntry) || err == nil && rev != prevRev {
		return 0, s.conflict(g, prevRev)
	}
	if err != nil {
		return 0, err
	}
	if err := checkAmend(prev, g); err != nil {
		return 0, err
	}
	return s.write(ctx, g, prevRev)
}

// checkAmend refuses an amendment that changes more than the moves of
// prev's slots: a bug in the caller.
func checkAmend(prev, g Generation) error {
	switch {
	case g.Number != prev.Number:
		return fmt.Errorf("cluster: an amendment of generation %d of topology %s is numbered %d; a new number is a new generation (Next)", prev.Number, g.Topology, g.Number)
	case !maps.Equal(g.Assignment, prev.Assignment) || !maps.Equal(g.Parallelism, prev.Parallelism) ||
		g.RestoreFrom != prev.RestoreFrom || g.Fingerprint != prev.Fingerprint:
		return fmt.Errorf("cluster: an amendment of generation %d of topology %s changes more than its moves; write a new generation instead", g.Number, g.Topology)
	}
	for from, m := range prev.Moves {
		if g.Moves[from].Incarnation < m.Incarnation {
			return fmt.Errorf("cluster: an amendment of generation %d of topology %s takes the slot of %s back from incarnation %d to %d", g.Number, g.Topology, from, m.Incarnation, g.Moves[from].Incarnation)
		}
	}
	return nil
}

// checkNumber refuses a g that does not follow the generation at prevRev:
// a bug in the caller, not a race, so it is not ErrConflict.
func (s *generations) checkNumber(ctx context.Context, g Generation, prevRev uint64) error {
	if prevRev == 0 {
		if g.Number != 1 {
			return fmt.Errorf("cluster: the first generation of topology %s must be number 1, not %d", g.Topology, g.Number)
		}
		return nil
	}
	prev, rev, err := s.Current(ctx, g.Topology)
	if errors.Is(err, ErrNotFound) {
		return s.conflict(g, prevRev)
	}
	if rev != prevRev && (err == nil || errors.Is(err, ErrInvalidEntry)) {
		return s.conflict(g, prevRev)
	}
	if errors.Is(err, ErrInvalidEntry) {
		// Written over a generation by something else. Workers ignore a
		// generation numbered no higher than theirs, and no valid one
		// before it was numbered higher than the revision it had, which
		// is below this one.
		if g.Number <= prevRev {
			return fmt.Errorf("cluster: generation %d of topology %s replaces an invalid entry at revision %d; number it above the revision (%d)", g.Number, g.Topology, prevRev, prevRev+1)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if g.Number != prev.Number+1 {
		return fmt.Errorf("cluster: generation %d of topology %s does not follow generation %d (revision %d); number it %d",
			g.Number, g.Topology, prev.Number, prevRev, prev.Number+1)
	}
	return nil
}

func (s *generations) conflict(g Generation, prevRev uint64) error {
	if prevRev == 0 {
		return fmt.Errorf("%w: topology %s has a generation already (another leader wrote it); read it with Current and decide again", ErrConflict, g.Topology)
	}
	return fmt.Errorf("%w: the generation of topology %s changed after revision %d (another leader wrote one, or it was deleted); read it with Current and decide again", ErrConflict, g.Topology, prevRev)
}

func (s *generations) Watch(ctx context.Context, topology string) (<-chan Generation, error) {
	if err := checkName("topology", topology); err != nil {
		return nil, err
	}
	events, err := s.b.watch(ctx, topology)
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot watch the generations of topology %s in %s: %w; check the NATS connection and retry", topology, s.b.where(), err)
	}
	out := make(chan Generation)
	go relay(ctx, events, out, func(ev event) []Generation {
		if ev.initDone || ev.deleted {
			return nil
		}
		g, err := s.decode(ev.entry)
		if err != nil {
			return nil // Current reports it
		}
		return []Generation{g}
	})
	return out, nil
}

func (s *generations) Delete(ctx context.Context, topology string) error {
	if err := checkName("topology", topology); err != nil {
		return err
	}
	if err := s.b.delete(ctx, topology, 0); err != nil {
		return fmt.Errorf("cluster: cannot delete the generation of topology %s in %s: %w; check the NATS connection and retry", topology, s.b.where(), err)
	}
	return nil
}

// decode reads a generation and checks it as Next checks what it writes.
func (s *generations) decode(e entry) (Generation, error) {
	var g Generation
	err := json.Unmarshal(e.value, &g)
	if err == nil {
		err = checkGeneration(g)
	}
	if err == nil && g.Topology != e.key {
		err = fmt.Errorf("it is of topology %q", g.Topology)
	}
	if err != nil {
		return Generation{}, fmt.Errorf("%w: entry %s in %s is not a valid generation: %w; the topology's leader writes a new generation over it", ErrInvalidEntry, e.key, s.b.where(), err)
	}
	return g, nil
}

// checkGeneration refuses a generation no leader writes: a worker must
// not size its tasks from a parallelism past the bound, nor place a task
// with a negative ID or on a member without a valid name.
func checkGeneration(g Generation) error {
	if err := checkName("topology", g.Topology); err != nil {
		return err
	}
	if g.Number == 0 {
		return fmt.Errorf("cluster: generation of topology %s has number 0; generations are numbered from 1", g.Topology)
	}
	if err := checkParallelism(fmt.Sprintf("generation %d", g.Number), g.Topology, g.Parallelism); err != nil {
		return err
	}
	for from, m := range g.Moves {
		if !slices.Contains(slices.Collect(maps.Values(g.Assignment)), from) {
			return fmt.Errorf("cluster: generation %d of topology %s moves the slot of %s, which has none", g.Number, g.Topology, from)
		}
		if err := checkName("member", m.To); err != nil {
			return fmt.Errorf("cluster: generation %d of topology %s moves the slot of %s: %w", g.Number, g.Topology, from, err)
		}
		if m.Incarnation == 0 || m.Incarnation >= 1<<20 {
			return fmt.Errorf("cluster: generation %d of topology %s moves the slot of %s as incarnation %d; incarnations of a move run from 1 to 2^20-1", g.Number, g.Topology, from, m.Incarnation)
		}
	}
	for task, member := range g.Assignment {
		if task < 0 {
			return fmt.Errorf("cluster: generation %d of topology %s assigns task %d, which cannot exist", g.Number, g.Topology, task)
		}
		if err := checkName("member", member); err != nil {
			return fmt.Errorf("cluster: generation %d of topology %s assigns task %d: %w", g.Number, g.Topology, task, err)
		}
	}
	return nil
}
