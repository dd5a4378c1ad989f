package workers

import (
	"context"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/topology"
)

// OnInProcessCluster makes a local run under cfg call f once its nodes
// have joined, with a function that stops the heartbeats of node i (in
// the order of worker-0, worker-1...) for d, as a busy process delays
// them, and returns when they beat again.
func OnInProcessCluster(cfg *Config, f func(pause func(i int, d time.Duration) error)) {
	cfg.inCluster = func(c *inCluster) {
		f(func(i int, d time.Duration) error { return c.pauseHeartbeats(c.names[i], d) })
	}
}

// CheckpointedCounters returns the keyed counters called name of every
// task of component in checkpoint epoch of topo, summed over the tasks:
// the state that checkpoint holds. A test of a run whose workers crash
// at any instant reads its end state here, since a crash after the
// final checkpoint keeps the crashed tasks' Cleanup from running.
func CheckpointedCounters(ctx context.Context, store checkpoint.Store, topo string, keyGroups int, epoch uint64, component, name string) (map[string]int64, error) {
	epochs, err := checkpoint.ListEpochs(ctx, store, topo)
	if err != nil {
		return nil, err
	}
	for _, e := range epochs {
		if e.Epoch != epoch {
			continue
		}
		if e.Manifest == nil {
			return nil, fmt.Errorf("epoch %d is not complete: %v", epoch, e.Err)
		}
		out := map[string]int64{}
		for _, te := range e.Manifest.Tasks {
			if te.Component != component {
				continue
			}
			blob, err := checkpoint.ReadTask(ctx, store, te)
			if err != nil {
				return nil, err
			}
			snap, err := decodeSnapshot(blob)
			if err != nil {
				return nil, err
			}
			st := topology.NewState(keyGroups)
			if err := st.Restore(snap.keyed); err != nil {
				return nil, err
			}
			st.Counters(name).Range(func(k string, n int64) bool {
				out[k] += n
				return true
			})
		}
		return out, nil
	}
	return nil, fmt.Errorf("no epoch %d of %s in the store", epoch, topo)
}

// SetAnnounceEvery sets how often a member that has not begun says
// "ready", until the returned function restores it.
func SetAnnounceEvery(d time.Duration) (restore func()) {
	old := announceEvery
	announceEvery = d
	return func() { announceEvery = old }
}
