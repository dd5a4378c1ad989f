package checkpoint

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// Restore is what Latest found: the newest usable epoch and the snapshot
// of each of its tasks.
type Restore struct {
	Manifest *Manifest
	Blobs    map[int][]byte // by task ID
	// Skipped explains why each newer epoch was not restored, newest
	// first: incomplete (wrapping ErrNoCheckpoint) or corrupt (wrapping
	// ErrCorrupt). The runtime logs them.
	Skipped []error
}

// EpochInfo describes one epoch in the store, for `ackflow checkpoints list`.
type EpochInfo struct {
	Epoch uint64
	// Complete says the manifest is there and verifies. ListEpochs does
	// not read the task objects; Latest does, and may still refuse it.
	Complete bool
	Manifest *Manifest // nil if incomplete or unreadable
	Err      error     // why the epoch is not usable, or nil
	Objects  int       // objects stored under the epoch, the manifest included
	Size     int64     // bytes of the task objects as the manifest records them; 0 without one
}

// epochObjects are the objects of one epoch, as List found them.
type epochObjects struct {
	epoch      uint64
	names      []string
	manifest   bool
	manifestAt int // index of the manifest in names, if manifest
}

// scan lists the epochs of topology, newest first.
func scan(ctx context.Context, s Store, topology string) ([]epochObjects, error) {
	if err := checkTopology(topology); err != nil {
		return nil, err
	}
	names, err := s.List(ctx, topology+"/")
	if err != nil {
		return nil, err
	}
	var epochs []epochObjects
	for _, name := range names { // sorted, so the objects of an epoch are together
		epoch, rest, ok := parseObject(topology, name)
		if !ok || rest == "" {
			continue
		}
		if len(epochs) == 0 || epochs[len(epochs)-1].epoch != epoch {
			epochs = append(epochs, epochObjects{epoch: epoch})
		}
		e := &epochs[len(epochs)-1]
		if rest == manifestBase {
			e.manifest, e.manifestAt = true, len(e.names)
		}
		e.names = append(e.names, name)
	}
	slices.Reverse(epochs)
	return epochs, nil
}

// refused says whether err is a verdict on a checkpoint (incomplete or
// corrupt) rather than a failure to look at it.
func refused(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoCheckpoint)
}

// Latest finds the newest epoch of topology that is complete, of this
// fingerprint, and whose every task object reads back and verifies, and
// returns it with its task snapshots. Newer epochs that are incomplete or
// corrupt are skipped, and Restore.Skipped says why.
//
// The error wraps ErrNoCheckpoint when there is nothing to restore (no
// epoch, or none that was ever completed), ErrCorrupt when epochs were
// completed but none is usable (it lists why each was refused), and
// ErrTopologyChanged when the newest complete epoch has another
// fingerprint. Any other error is the store's: Latest does not fall back
// to an older epoch because a store could not be read.
func Latest(ctx context.Context, s Store, topology, fingerprint string) (*Restore, error) {
	epochs, err := scan(ctx, s, topology)
	if err != nil {
		return nil, err
	}
	if len(epochs) == 0 {
		return nil, newError(ErrNoCheckpoint, nil, "checkpoint: no checkpoint of %s in this store; there is nothing to restore, so a run starts from the beginning of its sources", topology)
	}
	var skipped []error
	for _, e := range epochs {
		r, err := restore(ctx, s, topology, fingerprint, e)
		switch {
		case err == nil:
			r.Skipped = skipped
			return r, nil
		case refused(err):
			skipped = append(skipped, err)
		case errors.Is(err, ErrTopologyChanged) && len(skipped) > 0:
			return nil, newError(ErrTopologyChanged, nil, "%v\nnewer epochs were refused:%s", err, reasons(skipped))
		default:
			return nil, err
		}
	}
	return nil, noneUsable(topology, skipped)
}

// Load reads one epoch of topology as Latest reads the newest: it must be
// complete, of this fingerprint, and every task object must verify. There
// is no fallback: cluster mode restores the epoch a generation names, so
// that every worker of it starts from the same cut.
func Load(ctx context.Context, s Store, topology string, epoch uint64, fingerprint string) (*Restore, error) {
	if err := checkEpoch(topology, epoch); err != nil {
		return nil, err
	}
	epochs, err := scan(ctx, s, topology)
	if err != nil {
		return nil, err
	}
	for _, e := range epochs {
		if e.epoch == epoch {
			return restore(ctx, s, topology, fingerprint, e)
		}
	}
	return nil, incomplete(topology, epoch, nil)
}

func restore(ctx context.Context, s Store, topology, fingerprint string, e epochObjects) (*Restore, error) {
	if !e.manifest {
		return nil, incomplete(topology, e.epoch, nil)
	}
	m, err := ReadManifest(ctx, s, topology, e.epoch)
	if err != nil {
		return nil, err
	}
	if m.Fingerprint != fingerprint {
		return nil, newError(ErrTopologyChanged, nil,
			"checkpoint: the topology %s changed since its newest complete checkpoint, epoch %d: that checkpoint has fingerprint %q, this topology %q; run the shape it had to restore it, or delete its checkpoints to start from the beginning of the sources",
			topology, m.Epoch, m.Fingerprint, fingerprint)
	}
	blobs := make(map[int][]byte, len(m.Tasks))
	for _, t := range m.Tasks {
		data, err := ReadTask(ctx, s, t)
		if err != nil {
			return nil, err
		}
		blobs[t.Task] = data
	}
	return &Restore{Manifest: m, Blobs: blobs}, nil
}

// noneUsable is Latest's error when every epoch was refused. The reasons
// are in the text but not wrapped: a corrupt store must not also match
// ErrNoCheckpoint because one of its epochs was incomplete, or a caller
// would start from scratch over checkpoints it should have looked at.
func noneUsable(topology string, skipped []error) error {
	if slices.ContainsFunc(skipped, func(err error) bool { return errors.Is(err, ErrCorrupt) }) {
		return newError(ErrCorrupt, nil, "checkpoint: none of the %d epochs of %s can be restored:%s\nrestore the store from a backup, or delete these checkpoints to start from the beginning of the sources (ackflow checkpoints list shows them)",
			len(skipped), topology, reasons(skipped))
	}
	return newError(ErrNoCheckpoint, nil, "checkpoint: no checkpoint of %s was ever completed, so there is nothing to restore and a run starts from the beginning of its sources:%s", topology, reasons(skipped))
}

// ListEpochs describes every epoch of topology in the store, newest
// first. It reads the manifests but not the task objects.
func ListEpochs(ctx context.Context, s Store, topology string) ([]EpochInfo, error) {
	epochs, err := scan(ctx, s, topology)
	if err != nil {
		return nil, err
	}
	infos := make([]EpochInfo, 0, len(epochs))
	for _, e := range epochs {
		info := EpochInfo{Epoch: e.epoch, Objects: len(e.names)}
		if e.manifest {
			info.Manifest, info.Err = ReadManifest(ctx, s, topology, e.epoch)
		} else {
			info.Err = incomplete(topology, e.epoch, nil)
		}
		if info.Err != nil && !refused(info.Err) {
			return nil, info.Err
		}
		info.Complete = info.Err == nil
		if info.Manifest != nil {
			for _, t := range info.Manifest.Tasks {
				info.Size += t.Size
			}
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// Topologies returns the topologies that have checkpoints in s, sorted.
func Topologies(ctx context.Context, s Store) ([]string, error) {
	names, err := s.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var topologies []string
	for _, name := range names {
		topology, _, _ := strings.Cut(name, "/")
		if _, rest, ok := parseObject(topology, name); ok && rest != "" && plainName(topology) {
			topologies = append(topologies, topology)
		}
	}
	// Names sort "a-b/..." before "a/...", so the topologies need sorting.
	slices.Sort(topologies)
	topologies = slices.Compact(topologies)
	return topologies, nil
}
