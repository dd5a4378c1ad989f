package workers

import (
	"context"
	"fmt"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/topology"
)

// restoreFloor returns the newest checkpoint epoch that a run, or a
// cluster submission, must never go back to: those of earlier runs of the
// topology in the same store, whose state and source positions belong to
// other input. A run that resumed from epoch resumed may go back to it or
// to one it took itself; one that did not resume, only to its own, which
// are numbered from first, above every epoch in the store when it started.
func restoreFloor(first, resumed uint64) uint64 {
	if resumed > 0 {
		return resumed - 1
	}
	return first - 1
}

// latestAbove returns the latest complete checkpoint of topo above epoch
// floor (restoreFloor), or checkpoint.ErrNoCheckpoint: a rollback with no
// checkpoint of its own run starts the sources over.
func latestAbove(ctx context.Context, store checkpoint.Store, topo, fingerprint string, floor uint64) (*checkpoint.Restore, error) {
	rest, err := checkpoint.Latest(ctx, store, topo, fingerprint)
	if err == nil && rest.Manifest.Epoch <= floor {
		return nil, checkpoint.ErrNoCheckpoint
	}
	return rest, err
}

// restoreSnapshot returns the state task restores from, if any. Blobs are
// found by component and index, not task ID, so that a checkpoint taken
// with another parallelism of some component restores into this plan: a
// keyed component's state is gathered from every old task a key group at
// a time (checkRescale says which changes are allowed).
func (r *run) restoreSnapshot(task int) (taskSnapshot, bool, error) {
	r.restoreMu.Lock()
	rest := r.restore
	r.restoreMu.Unlock()
	if rest == nil {
		return taskSnapshot{}, false, nil
	}
	info := r.plan.tasks[task]
	if !info.stateful {
		return taskSnapshot{}, false, nil
	}
	old := blobsOf(rest, info.name)
	if len(old) == 0 {
		return taskSnapshot{}, false, nil
	}
	if len(old) == info.parallelism {
		snap, err := decodeSnapshot(old[info.index])
		if err != nil {
			return snap, false, fmt.Errorf("workers: task %d (%s[%d]): checkpoint %d: %w", task, info.name, info.index, rest.Manifest.Epoch, err)
		}
		snap.fromEpoch = rest.Manifest.Epoch
		return snap, true, nil
	}
	return r.regroup(rest, info, old)
}

// blobsOf returns the blobs of component's tasks in a checkpoint, by index.
func blobsOf(rest *checkpoint.Restore, component string) [][]byte {
	var out [][]byte
	for _, e := range rest.Manifest.Tasks {
		if e.Component != component {
			continue
		}
		for len(out) <= e.Index {
			out = append(out, nil)
		}
		out[e.Index] = rest.Blobs[e.Task]
	}
	return out
}

// regroup builds the keyed state of task from the key groups it owns in
// the old tasks' snapshots (a changed parallelism).
func (r *run) regroup(rest *checkpoint.Restore, info taskInfo, old [][]byte) (taskSnapshot, bool, error) {
	var keyed [][]byte
	for i, blob := range old {
		snap, err := decodeSnapshot(blob)
		if err != nil {
			return snap, false, fmt.Errorf("workers: %s[%d] of checkpoint %d: %w", info.name, i, rest.Manifest.Epoch, err)
		}
		keyed = append(keyed, snap.keyed)
	}
	from, to := topology.KeyGroupRange(r.plan.topo.KeyGroups, info.parallelism, info.index)
	st := topology.NewState(r.plan.topo.KeyGroups)
	if err := st.RestoreGroups(keyed, from, to); err != nil {
		return taskSnapshot{}, false, fmt.Errorf("workers: %s[%d]: regrouping checkpoint %d: %w", info.name, info.index, rest.Manifest.Epoch, err)
	}
	return taskSnapshot{isBolt: true, keyed: st.AppendSnapshot(nil), fromEpoch: rest.Manifest.Epoch}, true, nil
}

// checkRescale refuses to restore a checkpoint into a plan whose
// parallelism differs for a component whose state cannot be split by key
// group: a spout (its positions belong to its tasks' ranges), a bolt with
// its own Stateful snapshot, or a transactional sink (its pending
// transactions are named by task).
func (p *plan) checkRescale(m *checkpoint.Manifest) error {
	old := map[string]int{}
	for _, e := range m.Tasks {
		old[e.Component] = max(old[e.Component], e.Index+1)
	}
	for _, c := range p.topo.Components {
		n, had := old[c.Name]
		now := len(p.compTasks[c.Name])
		if !had || n == now {
			continue
		}
		t := p.tasks[p.compTasks[c.Name][0]]
		switch {
		case c.IsSpout():
			return fmt.Errorf("workers: spout %s had %d tasks in checkpoint %d and has %d now; a spout's positions cannot be split, so keep its parallelism", c.Name, n, m.Epoch, now)
		case t.tx:
			return fmt.Errorf("workers: sink %s had %d tasks in checkpoint %d and has %d now; its pending transactions are named by task, so keep its parallelism", c.Name, n, m.Epoch, now)
		case t.own:
			return fmt.Errorf("workers: bolt %s had %d tasks in checkpoint %d and has %d now; only keyed state (KeyedState) can be split by key group, not a Stateful snapshot, so keep its parallelism", c.Name, n, m.Epoch, now)
		}
	}
	return nil
}

// restoredEpoch is the epoch tasks start from (0: the beginning).
func (r *run) restoredEpoch() uint64 {
	r.restoreMu.Lock()
	defer r.restoreMu.Unlock()
	if r.restore == nil {
		return 0
	}
	return r.restore.Manifest.Epoch
}
