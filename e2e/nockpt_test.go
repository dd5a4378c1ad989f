//go:build e2e

package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ackflow/ackflow/sinks"
)

// TestClusterRunsWithoutCheckpoints submits a word count to three worker
// processes without checkpoints and SIGKILLs the spout's worker under
// load; its slot moves within the generation. At-most-once: the spout
// reads on from the position it wrote before it sent what it had read
// (cluster.Positions), so no count is ever published twice or beyond the
// input, and most are published. At-least-once with --checkpoint-every
// 0: the spout reads on, on another worker, from the position it wrote
// before its oldest line not yet fully processed (not from the beginning
// of the file), and every count the input implies is published (some
// perhaps more than once).
func TestClusterRunsWithoutCheckpoints(t *testing.T) {
	for _, guarantee := range []string{"at-most-once", "at-least-once"} {
		t.Run(guarantee, func(t *testing.T) {
			c := startTLSCluster(t)
			in, updates := filepath.Join(c.dir, "in.txt"), filepath.Join(c.dir, "updates")
			if err := os.Mkdir(updates, 0o755); err != nil {
				t.Fatal(err)
			}
			oracle := writeText(t, in, 768<<10, 13)
			workers := []string{"w1", "w2", "w3"}
			for _, w := range workers {
				c.worker(w)
			}
			// Without checkpoints a worker that joins late gets no tasks.
			for _, w := range workers {
				c.awaitWorker(w, 30*time.Second)
			}
			args := []string{"submit", "wordcount", "--guarantee", guarantee, "--parallelism", "split=5,count=1",
				"--set", "input=" + in, "--set", "updates=" + updates, "--set", "rate=1500", "--wait", "30s"}
			if guarantee == "at-least-once" {
				args = append(args, "--checkpoint-every", "0")
			}
			c.cli(args...)
			st := c.await("three workers run every task", 30*time.Second, func(s *clusterStatus) bool {
				return s.running() && len(s.Workers) == 3
			})
			time.Sleep(2 * time.Second) // counts are published
			victim := noCheckpointVictim(t, st, guarantee)
			gen := st.gen()
			c.signal(victim, syscall.SIGKILL)
			st = c.await("the killed worker's slot moved", 30*time.Second, func(s *clusterStatus) bool {
				_, moved := s.Generation.Moves[victim]
				return moved && s.running()
			})
			if st.gen() != gen {
				t.Fatalf("generation %d (%s) replaced %d after %s was killed; without checkpoints its slot should have moved", st.gen(), st.Generation.Reason, gen, victim)
			}
			t.Logf("SIGKILL %s: its slot moved to %s within generation %d", victim, st.Generation.Moves[victim].To, gen)
			c.await("the topology finishes", 3*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
			if guarantee == "at-least-once" {
				checkUpdates(t, updates, oracle, false)
				if n := c.logCount("at-least-once spout reads on from the oldest record"); n != 1 {
					t.Fatalf("%d spout tasks read on from a position they wrote, want the moved one:\n%s", n, c.logs())
				}
				return
			}
			checkAtMostOnce(t, updates, oracle, false)
		})
	}
}

// logCount is how many lines of the processes' logs hold text.
func (c *testCluster) logCount(text string) int {
	names, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	n := 0
	for _, name := range names {
		data, _ := os.ReadFile(name)
		n += strings.Count(string(data), text)
	}
	return n
}

// awaitWorker waits until ackflow health finds the worker connected.
func (c *testCluster) awaitWorker(name string, d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, stderr, err := ackflow(c.t, 10*time.Second, "health", "--worker", name, "--nats", c.url)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			fatalf(c.t, "worker %s is not connected after %v: %s\n%s", name, d, stderr, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noCheckpointVictim is the worker to kill: the one with the spout (and
// not the count, whose state would be lost).
func noCheckpointVictim(t *testing.T, st *clusterStatus, guarantee string) string {
	t.Helper()
	holds := map[string]map[string]bool{}
	for _, task := range st.Tasks {
		if holds[task.Owner] == nil {
			holds[task.Owner] = map[string]bool{}
		}
		holds[task.Owner][task.Component] = true
	}
	for _, w := range slices.Sorted(maps.Keys(holds)) {
		h := holds[w]
		if h["count"] {
			continue
		}
		if h["lines"] {
			return w
		}
	}
	b, _ := json.MarshalIndent(st.Tasks, "", "  ")
	t.Fatalf("no worker fits (%s); rename the workers or change the parallelism:\n%s", guarantee, b)
	return ""
}

// checkAtMostOnce checks that no key has more count updates in the sink
// than the input has records of it (each update is one record processed),
// and that none counts beyond the input. Unless restarted (the victims held
// keyed counts, which start again at 0 without checkpoints), no update's
// text may be there twice either. At most half may be lost.
func checkAtMostOnce(t *testing.T, dir string, oracle map[string]int64, restarted bool) {
	t.Helper()
	lines, err := sinks.Lines(dir, "updates")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	perKey := map[string]int64{}
	var total int64
	for _, n := range oracle {
		total += n
	}
	for _, l := range lines {
		l = strings.TrimSuffix(l, "\n")
		if seen[l] && !restarted {
			t.Fatalf("update %q is in the sink twice under at-most-once", l)
		}
		seen[l] = true
		w, k, _ := strings.Cut(l, "\t")
		n, err := strconv.ParseInt(k, 10, 64)
		if err != nil || n < 1 || n > oracle[w] {
			t.Fatalf("update %q counts beyond the input's %d", l, oracle[w])
		}
		if perKey[w]++; perKey[w] > oracle[w] {
			t.Fatalf("%s has %d count updates in the sink, more than the %d records of it the input makes: a record was processed twice", w, perKey[w], oracle[w])
		}
	}
	t.Logf("%d update lines for %d records in the input (at-most-once: %d lost)", len(lines), total, total-int64(len(lines)))
	if int64(len(lines)) < total/2 {
		t.Fatalf("only %d of %d updates: more lost than one of three workers had in flight", len(lines), total)
	}
}
