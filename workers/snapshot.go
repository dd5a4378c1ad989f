package workers

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ackflow/ackflow/topology"
)

// A task's checkpoint blob. A checkpoint is taken when no tree is in flight
// (every root a spout emitted before its position has completed), so a
// task's state is only what user code keeps: a spout's source position, a
// bolt's keyed State and its Stateful snapshot. The runtime's dedup filters
// and output logs are not in it: they describe trees, and there are none.
// After a restore the dedup filters start empty, which is right, since
// what was processed after the checkpoint is rolled back and must be
// processed again.
//
// Encoding, version 1: version byte, kind byte, then for a spout the
// position, for a bolt the keyed state and the Stateful snapshot, each as a
// uvarint length and bytes, with a presence byte before the Stateful one.
const (
	snapshotVersion = 1
	snapshotSpout   = 1
	snapshotBolt    = 2
)

// taskSnapshot is a decoded blob.
type taskSnapshot struct {
	position  []byte // spout
	keyed     []byte // bolt: topology.State snapshot, nil without keyed state
	user      []byte // bolt: Stateful.Snapshot
	hasUser   bool
	isBolt    bool
	fromEpoch uint64 // the checkpoint it came from
}

func encodeSpoutSnapshot(position []byte) []byte {
	b := []byte{snapshotVersion, snapshotSpout}
	return appendBytes(b, position)
}

func encodeBoltSnapshot(keyed []byte, user []byte, hasUser bool) []byte {
	b := []byte{snapshotVersion, snapshotBolt}
	b = appendBytes(b, keyed)
	if !hasUser {
		return append(b, 0)
	}
	return appendBytes(append(b, 1), user)
}

func appendBytes(b, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

var errSnapshot = errors.New("workers: task snapshot does not decode")

func decodeSnapshot(b []byte) (taskSnapshot, error) {
	var s taskSnapshot
	if len(b) < 2 || b[0] != snapshotVersion {
		return s, fmt.Errorf("%w: unknown version or too short (%d bytes)", errSnapshot, len(b))
	}
	kind, rest := b[1], b[2:]
	var err error
	switch kind {
	case snapshotSpout:
		s.position, rest, err = readBytes(rest)
	case snapshotBolt:
		s.isBolt = true
		if s.keyed, rest, err = readBytes(rest); err == nil {
			if len(rest) == 0 || rest[0] > 1 {
				return s, fmt.Errorf("%w: truncated, or no user state flag", errSnapshot)
			}
			s.hasUser, rest = rest[0] == 1, rest[1:]
			if s.hasUser {
				s.user, rest, err = readBytes(rest)
			}
		}
	default:
		return s, fmt.Errorf("%w: unknown kind %d", errSnapshot, kind)
	}
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%w: %d bytes after the end", errSnapshot, len(rest))
	}
	return s, err
}

func readBytes(b []byte) (data, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, fmt.Errorf("%w: truncated", errSnapshot)
	}
	if len(binary.AppendUvarint(nil, n)) != k {
		return nil, nil, fmt.Errorf("%w: a length padded with zero groups", errSnapshot)
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// fingerprint names the shape of a topology: checkpoints of another shape
// (components, streams, groupings, key groups) cannot be restored into it.
// Parallelism is not part of it: a checkpoint restores into a plan with
// other parallelism where the state can be split by key group
// (plan.checkRescale).
func (p *plan) fingerprint() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s|groups=%d", p.topo.Name, p.topo.KeyGroups)
	for _, c := range p.topo.Components {
		fmt.Fprintf(&sb, "|%s:spout=%v:keyed=%v", c.Name, c.IsSpout(), c.Keyed)
		for _, s := range c.StreamNames() {
			fmt.Fprintf(&sb, ":%s%v", s, c.Streams[s].Names())
		}
		for _, in := range c.Inputs {
			fmt.Fprintf(&sb, ":<%s/%s/%s", in.Source, in.Stream, in.Grouping)
		}
	}
	sum := sha256.Sum256([]byte(sb.String()))
	return hex.EncodeToString(sum[:8])
}

// positioned checks that every spout can rewind, which checkpoints need.
func (p *plan) positioned() error {
	for _, c := range p.topo.Components {
		if !c.IsSpout() {
			continue
		}
		if _, ok := c.SpoutFn().(topology.Positioned); !ok {
			return fmt.Errorf("workers: spout %s cannot rewind (it does not implement topology.Positioned), so checkpoints and exactly-once cannot restore it; use a replayable source (sources.File, sources.JetStream, sources.Sequence) or implement Position and Seek", c.Name)
		}
	}
	return nil
}
