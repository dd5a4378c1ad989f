package checkpoint

import (
	"context"
	"errors"
)

// prune deletes the epochs of m's topology that Commit no longer keeps:
// those older than the newest keep complete ones, and the incomplete ones
// older than m. An epoch counts as complete when its manifest verifies; a
// corrupt one within the window stays, for people to look at, but does not
// count, so keep usable epochs remain where the store allows it.
func prune(ctx context.Context, s Store, m Manifest, keep int) error {
	epochs, err := scan(ctx, s, m.Topology)
	if err != nil {
		return retentionError(m, []error{err})
	}
	var errs []error
	complete := 0
	for _, e := range epochs {
		switch {
		case e.epoch > m.Epoch:
			continue
		case e.epoch == m.Epoch:
			complete++
			continue
		case complete < keep && e.manifest:
			ok, err := verifies(ctx, s, m.Topology, e.epoch)
			if err != nil {
				errs = append(errs, err) // unknown: keep it until a later Commit can tell
			} else if ok {
				complete++
			}
			continue
		}
		if err := deleteEpoch(ctx, s, e); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return retentionError(m, errs)
	}
	return nil
}

// verifies says whether the manifest of epoch verifies; the error is the
// store's, when it could not tell.
func verifies(ctx context.Context, s Store, topology string, epoch uint64) (bool, error) {
	_, err := ReadManifest(ctx, s, topology, epoch)
	if err != nil && !refused(err) {
		return false, err
	}
	return err == nil, nil
}

// deleteEpoch deletes the manifest first, so that a deletion cut short
// leaves an incomplete epoch, which is never restored and is deleted by the
// next Commit, rather than a manifest whose objects are gone.
func deleteEpoch(ctx context.Context, s Store, e epochObjects) error {
	if e.manifest {
		if err := s.Delete(ctx, e.names[e.manifestAt]); err != nil {
			return err
		}
	}
	for i, name := range e.names {
		if e.manifest && i == e.manifestAt {
			continue
		}
		if err := s.Delete(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func retentionError(m Manifest, errs []error) error {
	return newError(ErrRetention, errors.Join(errs...), "checkpoint: epoch %d of %s is complete, but deleting older epochs failed; the next commit tries again:%s", m.Epoch, m.Topology, reasons(errs))
}
