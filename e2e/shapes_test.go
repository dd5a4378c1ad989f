//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterShapesSurviveSIGKILL runs the topology of e2e/shapesworker
// (an All grouping, a diamond, a fan-out and a failed partial emit, each
// ending in a keyed count whose every update goes to a two-phase-commit
// file sink) on three processes of that binary, a user's own worker binary
// built with cli.Main, and SIGKILLs two of them under load: first a worker
// that is not the leader (at-most-once: the spout's worker), then, once the
// topology runs again, the leader. A new worker process joins after each
// kill. The oracle comes from the input alone: every value is counted 3
// times in branch all, 2 in diamond, 3 in fanned and 4 in quartered, so
// the sink must hold every count update BRANCH/VALUE<TAB>1..want at least
// once, and exactly once under exactly-once. At most once, without
// checkpoints, a killed worker's keyed counts start again at 0 on their
// new owner, and a failed input is not replayed, so updates may be
// missing and a count's text may come again; but no value may be counted
// more often than the shape says (each update is one record processed),
// which a record processed twice, or a spout that read its input again,
// would break.
func TestClusterShapesSurviveSIGKILL(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "shapesworker")
	build := exec.Command("go", "build", "-o", prog, "./shapesworker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building e2e/shapesworker: %v\n%s", err, out)
	}
	for _, guarantee := range []string{"at-least-once", "exactly-once", "at-most-once"} {
		t.Run(guarantee, func(t *testing.T) { shapesRun(t, prog, guarantee) })
	}
}

// The counts each value gets in each branch of the shapes topology, and
// its input: values 0..shapesValues-1 read at shapesRate lines a second
// (15 s, time for two kills and their recoveries).
var shapesBranches = map[string]int64{"all": 3, "diamond": 2, "fanned": 3, "quartered": 4}

const (
	shapesValues = 6000
	shapesRate   = 400
)

func shapesRun(t *testing.T, prog, guarantee string) {
	c := startTLSCluster(t)
	c.prog, c.topo = prog, "shapes"
	in, updates := filepath.Join(c.dir, "in.txt"), filepath.Join(c.dir, "updates")
	if err := os.Mkdir(updates, 0o755); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	oracle := map[string]int64{}
	for v := range shapesValues {
		fmt.Fprintln(&text, v)
		for branch, n := range shapesBranches {
			oracle[fmt.Sprintf("%s/%d", branch, v)] = n
		}
	}
	if err := os.WriteFile(in, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		c.worker(w)
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		c.awaitWorker(w, 30*time.Second)
	}
	c.cli("submit", "shapes", "--guarantee", guarantee, "--set", "input="+in, "--set", "updates="+updates,
		"--set", fmt.Sprint("rate=", shapesRate), "--wait", "30s")
	st := c.await("three workers run every task", 30*time.Second, func(s *clusterStatus) bool {
		return s.running() && len(s.Workers) == 3
	})
	t.Logf("generation %d runs on w1-w3, leader %s", st.gen(), st.Leader)
	time.Sleep(2 * time.Second)

	// A worker that is not the leader, then the leader; a new worker joins
	// after each.
	alive := []string{"w1", "w2", "w3"}
	for i, joiner := range []string{"w4", "w5"} {
		victim := st.Leader
		switch {
		case i == 0 && guarantee == "at-most-once":
			victim = ownerOf(st, "numbers")
		case i == 0:
			if victim = followerWithTasks(st, alive); victim == "" {
				fatalf(t, "no worker but the leader %s runs tasks:\n%s", st.Leader, c.logs())
			}
		}
		plan := st.plan()
		t0 := time.Now()
		c.signal(victim, syscall.SIGKILL)
		alive = slices.DeleteFunc(alive, func(w string) bool { return w == victim })
		st = c.await("the topology runs again without "+victim, time.Minute, func(s *clusterStatus) bool {
			return s.plan() > plan && s.running() && !slices.ContainsFunc(s.Tasks, func(t taskRow) bool { return t.Owner == victim })
		})
		t.Logf("SIGKILL %s: generation %d (%s) runs every task after %v", victim, st.gen(), st.Generation.Reason, time.Since(t0).Round(time.Millisecond))
		c.worker(joiner)
		c.awaitWorker(joiner, 30*time.Second)
		alive = append(alive, joiner)
	}
	st = c.await("the topology finishes", 3*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	t.Logf("finished in generation %d (%s)", st.gen(), st.Generation.Reason)
	if guarantee == "at-most-once" {
		checkAtMostOnce(t, updates, oracle, true)
		return
	}
	checkUpdates(t, updates, oracle, guarantee == "exactly-once")
}

// ownerOf is the worker that runs the first task of component.
func ownerOf(st *clusterStatus, component string) string {
	for _, t := range st.Tasks {
		if t.Component == component {
			return t.Owner
		}
	}
	return ""
}

// followerWithTasks is a worker of alive that runs tasks and is not the
// leader.
func followerWithTasks(st *clusterStatus, alive []string) string {
	for _, w := range alive {
		if w != st.Leader && slices.ContainsFunc(st.Tasks, func(t taskRow) bool { return t.Owner == w }) {
			return w
		}
	}
	return ""
}
