package workers

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ackflow/ackflow/cluster"
)

// TestAWorkerStartedAgainIsNotTakenForItsDeadProcess: the leader's
// presence probe takes a process for gone after two "no responders" in a
// row. A worker killed and started again under its name is another
// process, which answers only once it has joined: its first request may
// miss, and the dead process's misses must not count against it. (They
// did, when the misses were counted by name: the restarted worker was
// taken for dead at its first miss, its slot moved away again and back.)
func TestAWorkerStartedAgainIsNotTakenForItsDeadProcess(t *testing.T) {
	t0 := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	w1 := processOf(cluster.Member{Name: "w1", Started: t0})
	dead := processOf(cluster.Member{Name: "w2", Started: t0})
	again := processOf(cluster.Member{Name: "w2", Started: t0.Add(5 * time.Second)})
	missed := absences{}
	look := func(answers map[process]error, want ...process) {
		t.Helper()
		got := missed.tally(answers)
		if !maps.Equal(got, set(want...)) {
			t.Fatalf("after answers %v: gone %v, want %v", answers, got, want)
		}
	}
	look(map[process]error{w1: nil, dead: nats.ErrNoResponders})
	look(map[process]error{w1: nil, dead: nats.ErrNoResponders}, dead)
	look(map[process]error{w1: nil, dead: nats.ErrNoResponders}, dead)
	// Its entry expires before the leader's probe runs again, and the
	// worker started again joins under the name: the probe never asks
	// the name without a process.
	look(map[process]error{w1: nil, again: nats.ErrNoResponders})
	look(map[process]error{w1: nil, again: nil})
	// A timeout is no verdict: it neither counts nor resets.
	look(map[process]error{w1: context.DeadlineExceeded, again: nats.ErrNoResponders})
	look(map[process]error{w1: context.DeadlineExceeded, again: nats.ErrNoResponders}, again)
	look(map[process]error{w1: nats.ErrNoResponders, again: nats.ErrNoResponders}, again)
	look(map[process]error{w1: nats.ErrTimeout, again: nil})
	look(map[process]error{w1: nats.ErrNoResponders}, w1)
	if len(missed) != 1 {
		t.Errorf("the probe still counts %v; it was asked of w1 only", missed)
	}

	// The leader gives slots to the new process while the old one is gone.
	l := &leading{r: &runner{n: &Node{prints: map[string]string{"t": "fp"}}, name: "t"}, gone: set(dead)}
	l.live = []cluster.Member{
		{Name: "w1", Started: t0, Topologies: map[string]string{"t": "fp"}},
		{Name: "w2", Started: t0.Add(5 * time.Second), Topologies: map[string]string{"t": "fp"}},
	}
	if got := l.eligible(); len(got) != 2 {
		t.Errorf("eligible %v while the dead w2's process is gone, want both live workers", got)
	}
	l.gone = set(again)
	if got := l.eligible(); len(got) != 1 || got[0] != "w1" {
		t.Errorf("eligible %v with the process of w2 gone, want w1", got)
	}
}

func set(ps ...process) map[process]bool {
	m := map[process]bool{}
	for _, p := range ps {
		m[p] = true
	}
	return m
}
