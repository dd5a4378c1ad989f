package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PositionsBucket holds the source positions of spouts in topologies
// without checkpoints.
const PositionsBucket = "ackflow_positions"

// SpoutPosition is where a spout task's source stands, in a topology
// without checkpoints, as its task wrote it. At most once, the task
// writes it before sending the records read up to there (Storm's Kafka
// spout commits offsets before it emits, for at-most-once, the same way):
// the records before it were sent (or lost with their worker), and none
// is sent twice. At least once, it is the position before the oldest
// record whose tree is not yet done: every record before it was fully
// processed. A spout task that starts again, on another worker or in a
// later generation, reads on from it. Submitted is the submission
// the position belongs to (Spec.Submitted), so that a topology submitted
// again starts from its sources' beginning.
type SpoutPosition struct {
	Topology  string    `json:"topology"`
	Task      int       `json:"task"`
	Submitted time.Time `json:"submitted"`
	Position  []byte    `json:"position"`
}

// Positions holds the positions of spout tasks without checkpoints, one key per
// topology and task, written by compare-and-set: a task reads its key's
// revision when it starts and writes on from it, so that a worker paused
// past its lease whose task was started again elsewhere fails its next
// write (ErrConflict) and stops sending.
type Positions interface {
	// Get returns the task's position and its revision, or ErrNotFound
	// (with revision 0) when it has none. A position that does not decode
	// comes with its revision and an error wrapping ErrInvalidEntry.
	Get(ctx context.Context, topology string, task int) (SpoutPosition, uint64, error)
	// Put writes p if its key's revision is still rev (0: it must have
	// none) and returns the new revision; ErrConflict if it changed.
	Put(ctx context.Context, p SpoutPosition, rev uint64) (uint64, error)
}

// KVPositions is Positions in the JetStream KV bucket ackflow_positions,
// one key per topology and task ("<topology>.<task>").
type KVPositions struct{ *positions }

// NewKVPositions opens the positions bucket, creating it if needed. The
// caller keeps ownership of js and its connection.
func NewKVPositions(ctx context.Context, js jetstream.JetStream, opts ...Option) (*KVPositions, error) {
	b, err := openKVBucket(ctx, js, jetstream.KeyValueConfig{Bucket: PositionsBucket, Description: "ackflow source positions of spouts without checkpoints"}, opts)
	if err != nil {
		return nil, err
	}
	return &KVPositions{&positions{b: b}}, nil
}

// MemoryPositions is Positions in memory, for tests.
type MemoryPositions struct{ *positions }

// NewMemoryPositions returns an empty MemoryPositions.
func NewMemoryPositions() *MemoryPositions { return &MemoryPositions{&positions{b: newMemBucket(0)}} }

type positions struct{ b bucket }

func positionKey(topology string, task int) string { return topology + "." + strconv.Itoa(task) }

func (s *positions) Get(ctx context.Context, topology string, task int) (SpoutPosition, uint64, error) {
	if err := checkName("topology", topology); err != nil {
		return SpoutPosition{}, 0, err
	}
	e, err := s.b.get(ctx, positionKey(topology, task))
	if errors.Is(err, errNoKey) {
		return SpoutPosition{}, 0, fmt.Errorf("%w: task %d of topology %s has no position in %s", ErrNotFound, task, topology, s.b.where())
	}
	if err != nil {
		return SpoutPosition{}, 0, fmt.Errorf("cluster: cannot read the position of task %d of topology %s in %s: %w; check the NATS connection and retry", task, topology, s.b.where(), err)
	}
	p, err := DecodeSpoutPosition(e.value)
	if err == nil && (p.Topology != topology || p.Task != task) {
		err = fmt.Errorf("%w: the entry names task %d of topology %q", ErrInvalidEntry, p.Task, p.Topology)
	}
	if err != nil {
		return SpoutPosition{}, e.rev, fmt.Errorf("cluster: the position of task %d of topology %s in %s: %w", task, topology, s.b.where(), err)
	}
	return p, e.rev, nil
}

func (s *positions) Put(ctx context.Context, p SpoutPosition, rev uint64) (uint64, error) {
	if err := checkName("topology", p.Topology); err != nil {
		return 0, err
	}
	if p.Task < 0 {
		return 0, fmt.Errorf("cluster: task %d of topology %s: a task number is not negative", p.Task, p.Topology)
	}
	value, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("cluster: the position of task %d of topology %s cannot be encoded: %w", p.Task, p.Topology, err)
	}
	key := positionKey(p.Topology, p.Task)
	if rev == 0 {
		rev, err = s.b.create(ctx, key, value)
	} else {
		rev, err = s.b.update(ctx, key, value, rev)
	}
	if errors.Is(err, errKeyExists) || errors.Is(err, errRevMismatch) {
		return 0, fmt.Errorf("%w: the position of task %d of topology %s in %s was written by another owner of the task", ErrConflict, p.Task, p.Topology, s.b.where())
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: cannot write the position of task %d of topology %s in %s: %w", p.Task, p.Topology, s.b.where(), err)
	}
	return rev, nil
}

// DecodeSpoutPosition decodes an entry of the positions bucket. It never
// panics; anything that is not a position is an error wrapping
// ErrInvalidEntry.
func DecodeSpoutPosition(data []byte) (SpoutPosition, error) {
	var p SpoutPosition
	if err := json.Unmarshal(data, &p); err != nil {
		return SpoutPosition{}, fmt.Errorf("%w: %v", ErrInvalidEntry, err)
	}
	if checkName("topology", p.Topology) != nil || p.Task < 0 || p.Submitted.IsZero() {
		return SpoutPosition{}, fmt.Errorf("%w: topology %q, task %d, submitted %v", ErrInvalidEntry, p.Topology, p.Task, p.Submitted)
	}
	return p, nil
}
