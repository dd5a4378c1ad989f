package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/workers"
)

// TestStatusShowsAMovedSlotsOwner: after a dead worker's slot moved to
// another within the generation, ackflow status names the new owner of
// the slot's tasks, their epoch as generation.incarnation, and their
// state from the new owner's report, which covers both of its slots.
func TestStatusShowsAMovedSlotsOwner(t *testing.T) {
	js, url, _ := submittedWordCount(t)
	ctx := context.Background()
	gens, err := cluster.NewKVGenerations(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	g := cluster.Generation{Topology: "wordcount", Number: 1, Parallelism: map[string]int{"lines": 1, "split": 2},
		Assignment: map[int]string{0: "w1", 1: "w2", 2: "w3"}, Created: time.Now().Add(time.Second), Reason: "submitted"}
	rev, err := gens.Next(ctx, g, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.Moves = map[string]cluster.Move{"w2": {To: "w3", Incarnation: 1, At: time.Now()}}
	if _, err := gens.Amend(ctx, g, rev); err != nil {
		t.Fatal(err)
	}
	statuses, err := cluster.NewKVStatuses(ctx, js, cluster.DefaultMembersConfig())
	if err != nil {
		t.Fatal(err)
	}
	report := func(member string, tasks ...workers.TaskStatus) {
		rep := workers.Report{Member: member, Generation: 1, Updated: time.Now(),
			Status: &workers.MemberStatus{Generation: 1, Begun: true, Tasks: tasks}}
		data, _ := json.Marshal(rep)
		if err := statuses.Put(ctx, cluster.Report{Topology: "wordcount", Member: member, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	report("w1", workers.TaskStatus{Task: 0, Component: "lines", Spout: true, Pending: 5})
	report("w3", workers.TaskStatus{Task: 2, Component: "split", Index: 1}, workers.TaskStatus{Task: 1, Component: "split", Queue: 7})
	run := func(args ...string) string {
		out, err := runAgainst(url, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return out
	}
	var st status
	if err := json.Unmarshal([]byte(run("status", "wordcount", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	want := map[int]struct {
		owner string
		inc   uint64
	}{0: {"w1", 0}, 1: {"w3", 1}, 2: {"w3", 0}}
	if len(st.Tasks) != len(want) {
		t.Fatalf("status lists %d tasks: %+v", len(st.Tasks), st.Tasks)
	}
	for _, ts := range st.Tasks {
		w := want[ts.Task]
		if ts.Owner != w.owner || ts.Incarnation != w.inc || ts.Epoch != 1 || ts.State != "running" {
			t.Errorf("task %d: owner %s, epoch %d.%d, %s; want %s, 1.%d, running", ts.Task, ts.Owner, ts.Epoch, ts.Incarnation, ts.State, w.owner, w.inc)
		}
	}
	if st.Tasks[1].Queue != 7 {
		t.Errorf("task 1's queue is %d, want the 7 its new owner reports", st.Tasks[1].Queue)
	}
	text := run("status", "wordcount")
	found := false
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "1" && f[2] == "w3" && f[3] == "1.1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("the status table does not show task 1 on w3 at epoch 1.1:\n%s", text)
	}
}

// TestStatusSaysWhyATopologyFailed: a topology the leader gave up on
// (FailAfter) shows its state and why in ackflow status, kill says it is
// already failed, and submit replaces it with a new submission.
func TestStatusSaysWhyATopologyFailed(t *testing.T) {
	_, url, reg := submittedWordCount(t)
	ctx := context.Background()
	spec, rev, err := reg.Get(ctx, "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	spec.State, spec.Error = cluster.StateFailed, "the tasks of worker w1 (Prepare: no database) failed, 3 times in a row"
	if _, err := reg.Update(ctx, spec, rev); err != nil {
		t.Fatal(err)
	}
	out, err := runAgainst(url, "status", "wordcount")
	if err != nil || !strings.Contains(out, "topology wordcount: failed") || !strings.Contains(out, "failed: the tasks of worker w1 (Prepare: no database) failed, 3 times in a row") {
		t.Fatalf("status of a failed topology: %v\n%s", err, out)
	}
	if out, err := runAgainst(url, "kill", "wordcount"); err != nil || !strings.Contains(out, "already failed") {
		t.Fatalf("kill of a failed topology: %v\n%s", err, out)
	}
	if out, err := runAgainst(url, "submit", "wordcount", "--fail-after", "2", "--wait", "0"); err != nil || !strings.Contains(out, "submitted wordcount") {
		t.Fatalf("submit over a failed topology: %v\n%s", err, out)
	}
	again, _, err := reg.Get(ctx, "wordcount")
	if err != nil || again.State != cluster.StateRunning || again.Error != "" || again.FailAfter != 2 {
		t.Fatalf("the resubmission reads back as %+v, %v", again, err)
	}
}
