package workers

import (
	"context"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
	"go.uber.org/goleak"
)

// TestCrashChaosStopsOnceDrained checks when crash chaos holds off: only
// when the newest generation's reports show every spout exhausted with
// nothing pending. A crash after the final checkpoint would keep the
// crashed tasks' Cleanup from running (a CI run lost a count task's share
// of word count's result that way, 1,622 words, although the checkpoint
// held them); a crash before that point is what the chaos is for.
func TestCrashChaosStopsOnceDrained(t *testing.T) {
	defer goleak.VerifyNone(t)
	timing := cluster.MembersConfig{HeartbeatEvery: 50 * time.Millisecond, DeadAfter: 250 * time.Millisecond}
	mem, err := cluster.NewMemoryCluster(timing)
	if err != nil {
		t.Fatal(err)
	}
	co, err := mem.Open(timing)
	if err != nil {
		t.Fatal(err)
	}
	c := &inCluster{topo: &topology.Topology{Name: "drain"}, client: co}
	put := func(member string, gen uint64, tasks ...TaskStatus) {
		t.Helper()
		rep := Report{Member: member, Generation: gen, Status: &MemberStatus{Generation: gen, Tasks: tasks}, Updated: time.Now()}
		if err := co.Statuses.Put(context.Background(), encodeReport("drain", rep)); err != nil {
			t.Fatal(err)
		}
	}
	spout := func(id int, exhausted bool, pending int64) TaskStatus {
		return TaskStatus{Task: id, Spout: true, Exhausted: exhausted, Pending: pending}
	}
	bolt := TaskStatus{Task: 9}
	steps := []struct {
		what string
		put  func()
		want bool
	}{
		{"no reports", func() {}, false},
		{"a report without spouts", func() { put("a", 1, bolt) }, false},
		{"a spout still reading", func() { put("b", 1, spout(0, false, 10)) }, false},
		{"exhausted with trees pending", func() { put("b", 1, spout(0, true, 3)) }, false},
		{"exhausted and drained", func() { put("b", 1, spout(0, true, 0)) }, true},
		{"a second spout still reading", func() { put("a", 1, bolt, spout(1, false, 0)) }, false},
		{"both drained", func() { put("a", 1, bolt, spout(1, true, 0)) }, true},
		{"a rollback: the newest generation reads again", func() { put("c", 2, spout(0, false, 0)) }, false},
		{"the newest generation drained, older reports left", func() { put("c", 2, spout(0, true, 0), spout(1, true, 0)) }, true},
	}
	for _, s := range steps {
		s.put()
		if got := c.drained(); got != s.want {
			t.Fatalf("%s: drained() = %v, want %v", s.what, got, s.want)
		}
	}
}
