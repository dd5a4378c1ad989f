package ui

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/workers"
)

// Cluster is the Source of a cluster, read through NATS alone (ackflow
// ui): the submitted topologies, their current generations and leaders,
// the live members, and the reports every worker writes of its part of
// each topology every --status-every. A report's figures cover the
// worker's tasks in its current generation, so the page's totals are
// those of the current generation, added up over the workers that report
// it; each worker's /metrics keeps counting across generations instead.
type Cluster struct {
	// Where names the cluster on the page, e.g. its NATS URL.
	Where       string
	Registry    cluster.Registry
	Generations cluster.Generations
	Elector     cluster.Elector
	Statuses    cluster.Statuses
	Members     cluster.Members
	// Manifest, if set, reads the manifest of a topology's checkpoint, for
	// the details of the latest one (its time, size and pause).
	Manifest func(ctx context.Context, topology string, epoch uint64) (*checkpoint.Manifest, error)

	mu        sync.Mutex
	manifests map[string]*checkpoint.Manifest // the latest read, by topology
	// last is what the workers last reported of each topology's current
	// generation: when the topology finishes or is killed, its workers stop
	// reporting figures, and the page shows these.
	last map[string]*Topology
}

// Snapshot implements Source.
func (c *Cluster) Snapshot(ctx context.Context) (*Snapshot, error) {
	now := time.Now()
	snap := &Snapshot{Where: c.Where, Taken: now}
	specs, err := c.Registry.List(ctx)
	if errors.Is(err, cluster.ErrInvalidEntry) {
		snap.Problems = append(snap.Problems, err.Error())
	} else if err != nil {
		return nil, err
	}
	byName := map[string]*Worker{}
	if members, err := c.Members.List(ctx); err != nil {
		snap.Problems = append(snap.Problems, err.Error())
	} else {
		for _, m := range members {
			byName[m.Name] = &Worker{Name: m.Name, Host: m.Host, PID: m.PID, Started: m.Started, State: "live"}
		}
	}
	worker := func(name string) *Worker {
		w := byName[name]
		if w == nil {
			w = &Worker{Name: name, State: "gone"} // its report outlived its membership
			byName[name] = w
		}
		return w
	}
	for _, spec := range specs {
		t, reports, err := c.topology(ctx, spec)
		if err != nil {
			snap.Problems = append(snap.Problems, err.Error())
		}
		for _, rep := range reports {
			w := worker(rep.Member)
			if rep.Updated.After(w.Heartbeat) {
				w.Heartbeat = rep.Updated
			}
			if rep.Error != "" {
				w.Error = rep.Error
			}
			if rep.Status != nil {
				w.Topologies = append(w.Topologies, fmt.Sprintf("%s (generation %d)", spec.Name, rep.Generation))
				w.Tasks += len(rep.Status.Tasks)
			}
		}
		c.checkpoint(ctx, t)
		c.remember(t)
		t.markBusiest()
		t.Findings = Explain(t)
		snap.Topologies = append(snap.Topologies, *t)
	}
	sortTopologies(snap.Topologies)
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		snap.Workers = append(snap.Workers, *byName[name])
	}
	return snap, nil
}

// topology reads spec's generation, leader and reports, and adds up the
// reports of the current generation.
func (c *Cluster) topology(ctx context.Context, spec cluster.Spec) (*Topology, []workers.Report, error) {
	t := &Topology{Name: spec.Name, State: spec.State, Guarantee: spec.Guarantee, Since: spec.Submitted}
	var g *cluster.Generation
	switch cur, _, err := c.Generations.Current(ctx, spec.Name); {
	case err == nil && !cur.Created.Before(spec.Submitted):
		g = &cur
		t.Generation, t.Reason, t.RestoredFrom, t.Since = cur.Number, cur.Reason, cur.RestoreFrom, cur.Created
		t.Counts = fmt.Sprintf("since generation %d started, added up over its workers' reports", cur.Number)
	case err != nil && !errors.Is(err, cluster.ErrNotFound):
		return t, nil, err
	}
	if l, err := c.Elector.Leader(ctx, spec.Name); err == nil {
		t.Leader = l
	}
	raw, err := c.Statuses.List(ctx, spec.Name)
	if err != nil {
		return t, nil, err
	}
	reports := make([]workers.Report, 0, len(raw))
	byMember := map[string]workers.Report{}
	for _, r := range raw {
		rep, err := workers.DecodeReport(r)
		if err != nil {
			continue // another program's entry, or a worker of another version
		}
		reports = append(reports, rep)
		byMember[rep.Member] = rep
		if rep.Error != "" {
			t.Errors = append(t.Errors, fmt.Sprintf("worker %s: %s", rep.Member, rep.Error))
		}
		if rep.Leader {
			t.Checkpoint.Epoch = max(t.Checkpoint.Epoch, rep.Checkpoint)
		}
		if g != nil && rep.Status != nil && rep.Generation == g.Number {
			addReport(t, rep.Status)
		}
	}
	if g != nil {
		t.Tasks = assignedTasks(spec, g, byMember)
	}
	return t, reports, nil
}

// addReport adds a member's figures of the current generation.
func addReport(t *Topology, st *workers.MemberStatus) {
	for _, cs := range st.Components {
		c := t.component(cs.Component, cs.Spout)
		c.Tasks += cs.Tasks
		c.Emitted += cs.Emitted
		c.Executed += cs.Executed
		c.Acked += cs.Acked
		c.Failed += cs.Failed
		c.Replayed += cs.Replayed
		c.TimedOut += cs.TimedOut
		c.DuplicatesDropped += cs.DuplicatesDropped
		c.DedupSuspects += cs.DedupSuspects
		c.DeadLettered += cs.DeadLettered
		c.Panics += cs.Panics
		c.EmitErrors += cs.EmitErrors
		c.Pending += cs.Pending
		c.Queue += cs.Queue
		if !cs.Spout && cs.Latency != nil {
			c.Capacity, c.HasCapacity = max(c.Capacity, cs.Capacity), true
		}
		if cs.Latency != nil {
			c.Latency.add(workers.LatencyBounds(cs.Spout), cs.Latency.Counts, cs.Latency.SumSeconds)
		}
	}
	tr, from := &t.Transport, st.Transport
	tr.LostFrames += from.LostFrames
	tr.FrameNACKs += from.FrameNACKs
	tr.FramesResent += from.FramesResent
	tr.DuplicateFrames += from.DuplicateFrames
	tr.FencedRecords += from.FencedRecords
	tr.Discarded += from.Discarded
	tr.BadFrames += from.BadFrames
	tr.PublishErrors += from.PublishErrors
	tr.Backpressure += from.Backpressure
	tr.FencedFrames += st.FencedFrames
}

// assignedTasks lists the generation's tasks with their owners and what
// the owners report of them, as ackflow status does.
func assignedTasks(spec cluster.Spec, g *cluster.Generation, byMember map[string]workers.Report) []Task {
	var out []Task
	for _, id := range slices.Sorted(maps.Keys(g.Assignment)) {
		owner := g.Owner(g.Assignment[id])
		tk := Task{ID: id, Owner: owner, Epoch: g.Number, State: "no report", Index: -1}
		rep, ok := byMember[owner]
		switch {
		case !live(spec.State):
			tk.State = spec.State
		case !ok:
		case rep.Generation != g.Number || rep.Status == nil:
			tk.State = "starting"
		default:
			tk.State = "starting"
			if rep.Status.Begun {
				tk.State = "running"
			}
		}
		if ok && rep.Status != nil && rep.Generation == g.Number {
			for _, ts := range rep.Status.Tasks {
				if ts.Task == id {
					tk.Component, tk.Index, tk.Queue, tk.Spout, tk.Pending, tk.Done = ts.Component, ts.Index, ts.Queue, ts.Spout, ts.Pending, ts.Exhausted
					tk.Capacity, tk.HasCapacity = ts.Capacity, !ts.Spout && ts.Component != ackerName
				}
			}
		}
		out = append(out, tk)
	}
	return out
}

// checkpoint fills in the details of t's latest checkpoint from its
// manifest, read once per epoch.
func (c *Cluster) checkpoint(ctx context.Context, t *Topology) {
	if c.Manifest == nil || t.Checkpoint.Epoch == 0 {
		return
	}
	c.mu.Lock()
	m := c.manifests[t.Name]
	c.mu.Unlock()
	if m == nil || m.Epoch != t.Checkpoint.Epoch {
		var err error
		if m, err = c.Manifest(ctx, t.Name, t.Checkpoint.Epoch); err != nil {
			// A checkpoint pruned meanwhile, or a store out of reach: the
			// page shows the epoch alone.
			t.Errors = append(t.Errors, "cannot read the latest checkpoint's manifest: "+strings.TrimPrefix(err.Error(), "checkpoint: "))
			return
		}
		c.mu.Lock()
		if c.manifests == nil {
			c.manifests = map[string]*checkpoint.Manifest{}
		}
		c.manifests[t.Name] = m
		c.mu.Unlock()
	}
	ck := &t.Checkpoint
	ck.Taken, ck.Duration, ck.Pause = m.Started.Add(m.Duration), m.Duration, m.Pause
	for _, e := range m.Tasks {
		ck.Size += e.Size
	}
}

// remember keeps t's figures while workers report them, and gives a
// topology that no worker runs any more the figures last reported of its
// generation.
func (c *Cluster) remember(t *Topology) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]*Topology{}
	}
	last := c.last[t.Name]
	if len(t.Components) > 0 {
		c.last[t.Name] = &Topology{Generation: t.Generation, Components: slices.Clone(t.Components), Tasks: slices.Clone(t.Tasks), Checkpoint: t.Checkpoint, Transport: t.Transport}
		return
	}
	if last == nil || last.Generation != t.Generation || live(t.State) {
		return
	}
	t.Components, t.Transport = last.Components, last.Transport
	if t.Checkpoint.Epoch == 0 {
		t.Checkpoint = last.Checkpoint
	}
	for i := range t.Tasks {
		if j := slices.IndexFunc(last.Tasks, func(k Task) bool { return k.ID == t.Tasks[i].ID }); j >= 0 {
			t.Tasks[i].Component, t.Tasks[i].Index, t.Tasks[i].Spout = last.Tasks[j].Component, last.Tasks[j].Index, last.Tasks[j].Spout
		}
	}
	t.Counts = fmt.Sprintf("of generation %d as its workers last reported them, before it was %s", t.Generation, t.State)
	for i := range t.Components {
		t.Components[i].HasCapacity, t.Components[i].Pending, t.Components[i].Queue = false, 0, 0
	}
}

func live(state string) bool {
	return state == cluster.StateRunning || state == cluster.StateKilling || state == cluster.StateFinishing
}
