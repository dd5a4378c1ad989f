package ui

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/ackflow/ackflow/workers"
	"github.com/prometheus/client_golang/prometheus"
)

// Local is the Source of a local run in this process (ackflow run --ui).
type Local struct {
	// Metrics is the run's registry (workers.Config.Metrics, through
	// metrics.Registry.Prometheus): the component figures are its
	// samples, added up as /metrics shows them.
	Metrics prometheus.Gatherer
	// View shows the run's workers and tasks (workers.Config.View); nil
	// shows the metrics alone.
	View *workers.LocalView
	// DeadLetters says where the run's dead letters go, for the page.
	DeadLetters string
}

// Snapshot implements Source.
func (l *Local) Snapshot(ctx context.Context) (*Snapshot, error) {
	now := time.Now()
	snap := &Snapshot{Where: "local run", Taken: now}
	fams, err := l.Metrics.Gather()
	if err != nil {
		if len(fams) == 0 {
			return nil, fmt.Errorf("ui: cannot gather the run's metrics: %w", err)
		}
		snap.Problems = append(snap.Problems, "some metrics could not be gathered: "+err.Error())
	}
	topos, gauges := fromMetrics(fams, now)
	var order []string
	if st, ok := l.viewStatus(); ok {
		t := topos[st.Topology]
		if t == nil {
			t = &Topology{Name: st.Topology}
			topos[st.Topology] = t
		}
		order = describeLocal(t, st, gauges)
		t.DeadLetters = l.DeadLetters
		snap.Workers = localWorkers(st)
	}
	for _, t := range topos {
		orderComponents(t, order)
		t.markBusiest()
		t.Findings = Explain(t)
		snap.Topologies = append(snap.Topologies, *t)
	}
	sortTopologies(snap.Topologies)
	return snap, nil
}

func (l *Local) viewStatus() (workers.LocalStatus, bool) {
	if l.View == nil {
		return workers.LocalStatus{}, false
	}
	return l.View.Status()
}

// describeLocal fills in what the view knows of the run: its state and
// tasks. Capacity comes from the same gauges as the component's, so that
// the two tables agree. It returns the components in task order.
func describeLocal(t *Topology, st workers.LocalStatus, gauges map[taskKey]*taskGauges) (order []string) {
	t.State, t.Guarantee, t.Since, t.Ended, t.Crashes = st.State, st.Guarantee.String(), st.Started, st.Ended, st.Crashes
	t.Counts = "since the run started"
	if st.Err != "" {
		t.Errors = append(t.Errors, st.Err)
	}
	crashed := map[int]bool{}
	for _, w := range st.Workers {
		crashed[w.Slot] = w.Crashed
	}
	for _, lt := range st.Tasks {
		task := Task{ID: lt.Task, Component: lt.Component, Index: lt.Index, Owner: slotName(lt.Worker), Epoch: lt.Epoch,
			Queue: lt.Queue, Spout: lt.Spout, Pending: lt.Pending, Done: lt.Exhausted, State: st.State}
		if g := gauges[taskKey{t.Name, lt.Component, fmt.Sprint(lt.Index)}]; g != nil && g.hasCapacity {
			task.Capacity, task.HasCapacity = g.capacity, true
		}
		if st.State == workers.LocalRunning && crashed[lt.Worker] {
			task.State = "crashed"
		}
		t.Tasks = append(t.Tasks, task)
		if lt.Component != ackerName && !slices.Contains(order, lt.Component) {
			order = append(order, lt.Component)
		}
	}
	return order
}

// ackerName is the system component of the ackers, which has tasks but
// no metrics of its own.
const ackerName = "__acker"

// localWorkers are the run's worker slots, all in this process.
func localWorkers(st workers.LocalStatus) []Worker {
	host, _ := os.Hostname()
	out := make([]Worker, 0, len(st.Workers))
	for _, w := range st.Workers {
		state := "live"
		switch {
		case st.State != workers.LocalRunning:
			state = "stopped"
		case w.Crashed:
			state = "crashed"
		}
		out = append(out, Worker{Name: slotName(w.Slot), Host: host, PID: os.Getpid(), Started: st.Started, Heartbeat: w.Heartbeat,
			State: state, Epoch: w.Incarnation, Tasks: w.Tasks, Topologies: []string{st.Topology}})
	}
	return out
}

func slotName(slot int) string { return fmt.Sprintf("worker %d", slot) }
