//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/wire"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestClusterSurvivesKillPauseJoinAndRebalance runs the word count on a
// cluster of worker processes of the real binary that share one NATS
// server on loopback: it SIGKILLs the worker with the spout under load,
// SIGSTOPs another past its lease and wakes it, injects a frame of a stale
// generation, starts a fourth worker and rebalances the count bolt from 2
// to 3 tasks. The count updates the sink committed are checked against
// the words of the input: under exactly-once every update is there once;
// under at-least-once none is missing. It prints the recovery times.
func TestClusterSurvivesKillPauseJoinAndRebalance(t *testing.T) {
	for _, guarantee := range []string{"at-least-once", "exactly-once"} {
		t.Run(guarantee, func(t *testing.T) { clusterRun(t, guarantee) })
	}
}

// clusterStatus is what ackflow status --json prints.
type clusterStatus struct {
	Topology struct {
		State string `json:"state"`
	} `json:"topology"`
	Generation *struct {
		Number      uint64         `json:"number"`
		Parallelism map[string]int `json:"parallelism"`
		Assignment  map[int]string `json:"assignment"`
		RestoreFrom uint64         `json:"restore_from"`
		Reason      string         `json:"reason"`
		Created     time.Time      `json:"created"`
		Moves       map[string]struct {
			To          string `json:"to"`
			Incarnation uint64 `json:"incarnation"`
		} `json:"moves"`
	} `json:"generation"`
	Leader     string      `json:"leader"`
	Checkpoint uint64      `json:"checkpoint"`
	Tasks      []taskRow   `json:"tasks"`
	Workers    []workerRow `json:"workers"`
}

type taskRow struct {
	Task      int    `json:"task"`
	Component string `json:"component"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
	State     string `json:"state"`
}

type workerRow struct {
	Name         string    `json:"name"`
	Generation   uint64    `json:"generation"`
	Records      int64     `json:"records"`
	FencedFrames int64     `json:"fenced_frames"`
	Error        string    `json:"error"`
	Updated      time.Time `json:"updated"`
}

func (s *clusterStatus) gen() uint64 {
	if s.Generation == nil {
		return 0
	}
	return s.Generation.Number
}

// plan numbers the plan the workers run: it grows with each new
// generation, and with each move of a dead worker's stateless slot
// within one (cluster.Move), after which a generation runs on.
func (s *clusterStatus) plan() uint64 {
	if s.Generation == nil {
		return 0
	}
	p := s.Generation.Number << 20
	for _, m := range s.Generation.Moves {
		p += m.Incarnation
	}
	return p
}

// running reports whether every task of the generation runs.
func (s *clusterStatus) running() bool {
	if s.Generation == nil || len(s.Tasks) == 0 {
		return false
	}
	for _, t := range s.Tasks {
		if t.State != "running" {
			return false
		}
	}
	return true
}

// records sums what the workers of the current generation emitted.
func (s *clusterStatus) records() int64 {
	var n int64
	for _, w := range s.Workers {
		if w.Generation == s.gen() {
			n += w.Records
		}
	}
	return n
}

func (s *clusterStatus) owner(component string) string {
	for _, t := range s.Tasks {
		if t.Component == component {
			return t.Owner
		}
	}
	return ""
}

type testCluster struct {
	t    *testing.T
	url  string
	dir  string
	cmds map[string]*exec.Cmd
	// natsOpts are how the test itself connects (the processes read the
	// same credentials from the environment).
	natsOpts []nats.Option
	// moreLogs, if set, adds the logs of processes the test did not start
	// itself (the docker suite's containers) to a failure message.
	moreLogs func() string
	// prog, if set, is the binary the workers and commands run instead of
	// ackflow (a user's own worker binary), and topo the topology status
	// reports on instead of wordcount.
	prog, topo string
}

// program is the binary the cluster's workers and commands run.
func (c *testCluster) program() string {
	if c.prog != "" {
		return c.prog
	}
	return binary
}

// topology is the topology status reports on.
func (c *testCluster) topology() string {
	if c.topo != "" {
		return c.topo
	}
	return "wordcount"
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs the binary in the background, its output in dir/name.log;
// the test's cleanup kills what is still running.
func (c *testCluster) start(name string, args ...string) {
	c.t.Helper()
	log, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		fatalf(c.t, "%v", err)
	}
	cmd := exec.Command(c.program(), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		fatalf(c.t, "%v", err)
	}
	c.cmds[name] = cmd
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
}

func (c *testCluster) worker(name string) {
	c.start(name, "worker", "--nats", c.url, "--name", name, "--log-level", "info")
}

func (c *testCluster) signal(name string, sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmds[name].Process.Signal(sig); err != nil {
		fatalf(c.t, "%v", err)
	}
}

func (c *testCluster) cli(args ...string) string {
	c.t.Helper()
	stdout, stderr, err := runProgram(c.t, c.program(), 2*time.Minute, append(args, "--nats", c.url)...)
	if err != nil {
		fatalf(c.t, "ackflow %s: %v\n%s\n%s\n%s", strings.Join(args, " "), err, stdout, stderr, c.logs())
	}
	return stdout
}

// status reads ackflow status --json. A NATS server of the docker suite's
// cluster restarts on purpose, and a request that reached it, or a stream
// leader on it, just before it went down gets no answer until the CLI's
// timeout; so status tries again twice, saying so, before it fails the
// test. What is checked is the output, never how often status answers.
func (c *testCluster) status() *clusterStatus {
	c.t.Helper()
	args := []string{"status", c.topology(), "--json", "--nats", c.url}
	var stdout, stderr string
	var err error
	for try := 1; ; try++ {
		if stdout, stderr, err = runProgram(c.t, c.program(), 2*time.Minute, args...); err == nil || try == 3 {
			break
		}
		c.t.Logf("ackflow status failed (try %d of 3): %v: %s", try, err, strings.TrimSpace(stderr))
	}
	if err != nil {
		fatalf(c.t, "%s --json: %v\n%s\n%s\n%s", strings.Join(args[:2], " "), err, stdout, stderr, c.logs())
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		fatalf(c.t, "status --json: %v\n%s", err, stdout)
	}
	return &st
}

// await polls the status until ok accepts it.
func (c *testCluster) await(what string, d time.Duration, ok func(*clusterStatus) bool) *clusterStatus {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		st := c.status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			fatalf(c.t, "%s: not after %v; status:\n%s\n%s", what, d, b, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logs returns the tails of the processes' logs, for a failure message.
func (c *testCluster) logs() string {
	var b strings.Builder
	names, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, n := range names {
		data, _ := os.ReadFile(n)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(n), strings.Join(lines, "\n"))
	}
	if c.moreLogs != nil {
		b.WriteString(c.moreLogs())
	}
	return b.String()
}

// keepLogs copies the processes' logs to dir (ACKFLOW_E2E_LOGS=DIR keeps
// them after the test).
func (c *testCluster) keepLogs(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Log(err)
		return
	}
	names, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, n := range names {
		if data, err := os.ReadFile(n); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(n)), data, 0o644)
		}
	}
	c.t.Logf("logs kept in %s", dir)
}

// rate measures records per second over d.
func (c *testCluster) rate(d time.Duration) float64 {
	a := c.status()
	start := time.Now()
	time.Sleep(d)
	b := c.status()
	if a.plan() != b.plan() {
		return 0
	}
	return float64(b.records()-a.records()) / time.Since(start).Seconds()
}

// recovered measures, after an event at t0 that replaced the plan below
// (see clusterStatus.plan), how long until a new plan runs every task and
// until records flow at frac of the rate before.
func (c *testCluster) recovered(t0 time.Time, below uint64, before, frac float64) (running, flowing time.Duration) {
	c.t.Helper()
	st := c.await("a new plan runs", time.Minute, func(s *clusterStatus) bool { return s.plan() > below && s.running() })
	running = time.Since(t0)
	plan, last, lastAt := st.plan(), st.records(), time.Now()
	for time.Since(t0) < time.Minute {
		time.Sleep(250 * time.Millisecond)
		s := c.status()
		if s.plan() != plan {
			plan, last, lastAt = s.plan(), s.records(), time.Now()
			continue
		}
		now := time.Now()
		if r := float64(s.records()-last) / now.Sub(lastAt).Seconds(); r >= frac*before {
			return running, now.Sub(t0)
		}
		last, lastAt = s.records(), now
	}
	fatalf(c.t, "records did not flow again at %.0f%% of %.0f/s within a minute", frac*100, before)
	return
}

// startTLSCluster starts a NATS server that requires TLS and a password,
// as a deployment's would, and checks that a worker with a wrong password
// is refused; every process the test starts then connects with the
// credentials in its environment.
func startTLSCluster(t *testing.T) *testCluster {
	dir := t.TempDir()
	c := &testCluster{t: t, dir: dir, cmds: map[string]*exec.Cmd{}}
	if keep := os.Getenv("ACKFLOW_E2E_LOGS"); keep != "" {
		// Registered first, so it runs after the processes are stopped.
		t.Cleanup(func() { c.keepLogs(filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))) })
	}
	// The server requires TLS and a password: every process connects as
	// a deployment would, with the credentials in its environment.
	port := freePort(t)
	c.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	ca, cert, key := serverTLS(t, dir)
	password := fmt.Sprintf("pw-%d", rand.Uint64())
	t.Setenv("ACKFLOW_NATS_USER", "ackflow")
	t.Setenv("ACKFLOW_NATS_PASSWORD", password)
	t.Setenv("ACKFLOW_TLS_CA", ca)
	c.natsOpts = []nats.Option{nats.UserInfo("ackflow", password), nats.RootCAs(ca)}
	c.start("nats", "nats", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--store", filepath.Join(dir, "js"),
		"--user", "ackflow", "--password", password, "--tls-cert", cert, "--tls-key", key)
	waitNATS(t, c.url, c.natsOpts...)
	if _, stderr, err := ackflow(t, 20*time.Second, "worker", "--name", "intruder", "--nats", c.url, "--password", "wrong"); err == nil || !strings.Contains(stderr, "refused this client's credentials") {
		t.Fatalf("a worker with a wrong password: %v\n%s", err, stderr)
	}
	return c
}

func clusterRun(t *testing.T, guarantee string) {
	c := startTLSCluster(t)
	dir := c.dir
	in, updates := filepath.Join(dir, "in.txt"), filepath.Join(dir, "updates")
	if err := os.Mkdir(updates, 0o755); err != nil {
		t.Fatal(err)
	}
	oracle := writeText(t, in, 3<<20, 5)
	const linesPerSec = 1500
	for _, w := range []string{"w1", "w2", "w3"} {
		c.worker(w)
	}
	c.cli("submit", "wordcount", "--guarantee", guarantee, "--set", "input="+in, "--set", "updates="+updates,
		"--set", fmt.Sprint("rate=", linesPerSec), "--wait", "30s")
	st := c.await("three workers run every task", 30*time.Second, func(s *clusterStatus) bool {
		return s.running() && len(s.Workers) == 3
	})
	before := c.rate(2 * time.Second)
	t.Logf("generation %d runs on w1-w3; %.0f records/s", st.gen(), before)

	// SIGKILL the worker with the spout, under load.
	victim := st.owner("lines")
	killedPlan := st.plan()
	t0 := time.Now()
	c.signal(victim, syscall.SIGKILL)
	running, flowing := c.recovered(t0, killedPlan, before, 0.8)
	st = c.status()
	for _, task := range st.Tasks {
		if task.Owner == victim {
			t.Fatalf("task %d is still owned by the killed %s", task.Task, victim)
		}
	}
	t.Logf("SIGKILL %s: generation %d (%s, from checkpoint %d) runs every task after %v; records flow at 80%% of the rate before after %v",
		victim, st.gen(), st.Generation.Reason, st.Generation.RestoreFrom, running.Round(time.Millisecond), flowing.Round(time.Millisecond))

	// SIGSTOP a survivor past its lease; wake it; its old generation's
	// work must leave no trace (the sink is checked at the end).
	var paused string
	for _, w := range []string{"w1", "w2", "w3"} {
		if w != victim && w != st.Leader {
			paused = w
		}
	}
	pausedPlan := st.plan()
	c.signal(paused, syscall.SIGSTOP)
	t0 = time.Now()
	st = c.await("the paused worker's tasks move", 30*time.Second, func(s *clusterStatus) bool {
		if s.plan() <= pausedPlan || !s.running() {
			return false
		}
		for _, task := range s.Tasks {
			if task.Owner == paused {
				return false
			}
		}
		return true
	})
	t.Logf("SIGSTOP %s: generation %d (%s, moves %v) runs without it after %v", paused, st.gen(), st.Generation.Reason, st.Generation.Moves, time.Since(t0).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	c.signal(paused, syscall.SIGCONT)
	st = c.await("the woken worker rejoins", 30*time.Second, func(s *clusterStatus) bool {
		return s.running() && slices.ContainsFunc(s.Tasks, func(t taskRow) bool { return t.Owner == paused })
	})
	t.Logf("SIGCONT %s: it runs tasks again in generation %d", paused, st.gen())

	// A frame of a stale generation is dropped and counted.
	injectStale(t, c, st)

	// A fourth worker joins; the count bolt goes from 2 tasks to 3.
	c.worker("w4")
	c.await("w4 runs tasks", 30*time.Second, func(s *clusterStatus) bool {
		return s.running() && slices.ContainsFunc(s.Workers, func(w workerRow) bool { return w.Name == "w4" && w.Generation == s.gen() })
	})
	c.cli("rebalance", "wordcount", "--parallelism", "count=3")
	st = c.status()
	counts := 0
	for _, task := range st.Tasks {
		if task.Component == "count" {
			counts++
		}
		if task.Owner == victim || task.State != "running" {
			t.Fatalf("after the rebalance task %d is %s on %s", task.Task, task.State, task.Owner)
		}
	}
	if counts != 3 || st.Generation.Parallelism["count"] != 3 {
		t.Fatalf("after the rebalance count has %d tasks (generation says %d), want 3", counts, st.Generation.Parallelism["count"])
	}
	t.Logf("rebalanced: generation %d (from checkpoint %d), owners %v", st.gen(), st.Generation.RestoreFrom, st.Generation.Assignment)

	c.await("the topology finishes", 3*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	checkUpdates(t, updates, oracle, guarantee == "exactly-once")
}

// TestClusterMovesAStatelessWorkersSlot runs at-least-once word count on
// four worker processes, with few stateful tasks (one spout, one count,
// two sink tasks) and many stateless ones (seven split tasks), and
// SIGKILLs a worker that holds only stateless tasks under load (with
// these names and tasks rendezvous hashing leaves two such workers, so
// one is not the leader, whose death would roll back). Its slot moves to a live worker
// within the running generation (no rollback: the generation number stays,
// the stateful tasks keep running), every task runs again; started again,
// the worker gets its slot back, again without a new generation; and the
// sink's count updates miss no word of the input. It prints the recovery
// times.
func TestClusterMovesAStatelessWorkersSlot(t *testing.T) {
	c := startTLSCluster(t)
	in, updates := filepath.Join(c.dir, "in.txt"), filepath.Join(c.dir, "updates")
	if err := os.Mkdir(updates, 0o755); err != nil {
		t.Fatal(err)
	}
	oracle := writeText(t, in, 2<<20, 9)
	workers := []string{"w1", "w2", "w3", "w4"}
	for _, w := range workers {
		c.worker(w)
	}
	c.cli("submit", "wordcount", "--guarantee", "at-least-once", "--parallelism", "split=7,count=1",
		"--set", "input="+in, "--set", "updates="+updates, "--set", "rate=1500", "--wait", "30s")
	st := c.await("four workers run every task", 30*time.Second, func(s *clusterStatus) bool {
		return s.running() && len(s.Workers) == 4
	})
	before := c.rate(2 * time.Second)
	stateful := map[string]bool{}
	for _, task := range st.Tasks {
		if task.Component != "split" && task.Component != "__acker" {
			stateful[task.Owner] = true
		}
	}
	victim := ""
	for _, w := range workers {
		if !stateful[w] && w != st.Leader && slices.ContainsFunc(st.Tasks, func(t taskRow) bool { return t.Owner == w }) {
			victim = w
			break
		}
	}
	if victim == "" {
		b, _ := json.MarshalIndent(st.Tasks, "", "  ")
		t.Fatalf("no worker but the leader %s holds only stateless tasks; rename the workers or change the parallelism:\n%s", st.Leader, b)
	}
	gen, plan := st.gen(), st.plan()
	t0 := time.Now()
	c.signal(victim, syscall.SIGKILL)
	running, flowing := c.recovered(t0, plan, before, 0.8)
	st = c.status()
	if st.gen() != gen {
		t.Fatalf("generation %d (%s) replaced %d after the stateless %s was killed; its slot should have moved within the generation", st.gen(), st.Generation.Reason, gen, victim)
	}
	mv, ok := st.Generation.Moves[victim]
	if !ok || mv.To == victim || mv.Incarnation != 1 {
		t.Fatalf("after the kill of %s the generation's moves are %+v", victim, st.Generation.Moves)
	}
	for _, task := range st.Tasks {
		if task.Owner == victim {
			t.Fatalf("task %d is still owned by the killed %s", task.Task, victim)
		}
	}
	t.Logf("SIGKILL %s (stateless): its slot moved to %s in generation %d; every task runs after %v, records flow at 80%% of %.0f/s after %v",
		victim, mv.To, gen, running.Round(time.Millisecond), before, flowing.Round(time.Millisecond))
	// Started again, it gets its slot back within the generation: no
	// handover, no checkpoint restored.
	t0 = time.Now()
	c.worker(victim)
	st = c.await("the restarted worker runs its slot again", 30*time.Second, func(s *clusterStatus) bool {
		m := s.Generation.Moves[victim]
		// Its report, not the one the killed process left behind.
		fresh := slices.ContainsFunc(s.Workers, func(w workerRow) bool { return w.Name == victim && w.Updated.After(t0) })
		return fresh && s.running() && m.To == victim && m.Incarnation == 2 && slices.ContainsFunc(s.Tasks, func(t taskRow) bool { return t.Owner == victim })
	})
	if st.gen() != gen {
		t.Fatalf("generation %d (%s) replaced %d when %s came back", st.gen(), st.Generation.Reason, gen, victim)
	}
	t.Logf("%s started again: it runs its slot again after %v, in generation %d", victim, time.Since(t0).Round(time.Millisecond), st.gen())
	c.await("the topology finishes", 3*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	checkUpdates(t, updates, oracle, false)
}

// TestClusterRetriesASourceThatIsMissing submits a word count whose
// input stream does not exist yet. The spout's Open fails on its worker;
// the leader starts new generations with a growing backoff, and status
// shows the worker's error. Once the stream exists, the next generation
// runs and the topology finishes with every word counted.
func TestClusterRetriesASourceThatIsMissing(t *testing.T) {
	c := startTLSCluster(t)
	in, updates := filepath.Join(c.dir, "in.txt"), filepath.Join(c.dir, "updates")
	if err := os.Mkdir(updates, 0o755); err != nil {
		t.Fatal(err)
	}
	oracle := writeText(t, in, 256<<10, 11)
	c.worker("w1")
	c.worker("w2")
	c.cli("submit", "wordcount", "--guarantee", "exactly-once", "--set", "in-stream=LINES", "--set", "updates="+updates, "--wait", "0")
	// From the fifth generation on the next one waits 4 s or more, so the
	// stream is complete before any spout opens it again (its end is read
	// when it opens).
	st := c.await("the missing stream is reported and retried", time.Minute, func(s *clusterStatus) bool {
		if s.gen() < 5 || !strings.Contains(s.Generation.Reason, "failed") {
			return false
		}
		return slices.ContainsFunc(s.Workers, func(w workerRow) bool {
			return strings.Contains(w.Error, `stream "LINES" does not exist on nats://127.0.0.1:`) && w.Updated.After(s.Generation.Created)
		})
	})
	t.Logf("generation %d: %s", st.gen(), st.Generation.Reason)
	nc, js := c.connect()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LINES", Subjects: []string{"lines.in"}}); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(text)) {
		if _, err := js.PublishAsync("lines.in", []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the lines were not stored in time")
	}
	if stored := time.Since(st.Generation.Created); stored > 3500*time.Millisecond {
		t.Fatalf("the stream was complete only %v after the generation began: a spout may have opened it half full", stored)
	}
	st = c.await("the topology finishes", time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	t.Logf("finished in generation %d (%s)", st.gen(), st.Generation.Reason)
	checkUpdates(t, updates, oracle, true)
}

// connect connects to the cluster's NATS server as the test, with the
// credentials the processes use.
func (c *testCluster) connect() (*nats.Conn, jetstream.JetStream) {
	c.t.Helper()
	nc, err := nats.Connect(c.url, append([]nats.Option{nats.Name("ackflow e2e"), nats.MaxReconnects(-1)}, c.natsOpts...)...)
	if err != nil {
		fatalf(c.t, "%v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		fatalf(c.t, "%v", err)
	}
	return nc, js
}

func waitNATS(t *testing.T, url string, opts ...nats.Option) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NATS at %s did not start: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// injectStale publishes a data frame of an older generation to a split
// task and expects its owner to count it as fenced.
func injectStale(t *testing.T, c *testCluster, st *clusterStatus) {
	t.Helper()
	var task int
	var owner string
	for _, tk := range st.Tasks {
		if tk.Component == "split" {
			task, owner = tk.Task, tk.Owner
		}
	}
	fenced := func(s *clusterStatus) int64 {
		for _, w := range s.Workers {
			if w.Name == owner && w.Generation == s.gen() {
				return w.FencedFrames
			}
		}
		return -1
	}
	base := fenced(st)
	nc, _ := c.connect()
	defer nc.Close()
	stale := workers.FrameEpoch(st.gen()-1, 0)
	f := &wire.Frame{Kind: wire.KindData, Src: 0, Epoch: stale, Seq: 1, Records: []wire.Record{
		{ID: 42, Stream: "line", SrcTask: 0, Epoch: stale, Anchors: []wire.Anchor{{Tree: 7, Val: 9}}, Values: []any{"stale words that must not count"}},
	}}
	data, err := wire.AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(fmt.Sprintf("ackflow.wordcount.task.%d", task), data); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	c.await("the stale frame is counted", 10*time.Second, func(s *clusterStatus) bool { return s.gen() == st.gen() && fenced(s) > base })
	t.Logf("a frame of generation %d sent to task %d on %s was dropped and counted", st.gen()-1, task, owner)
}

// checkUpdates reads the count updates the sink committed: every update
// (word, k) for k up to the word's count must be there, exactly once if
// exact, and none for words that are not in the input.
func checkUpdates(t *testing.T, dir string, oracle map[string]int64, exact bool) {
	t.Helper()
	lines, err := sinks.Lines(dir, "updates")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range lines {
		seen[strings.TrimSuffix(l, "\n")]++
	}
	var total int64
	missing, twice := 0, 0
	for w, n := range oracle {
		total += n
		for k := int64(1); k <= n; k++ {
			switch c := seen[fmt.Sprintf("%s\t%d", w, k)]; {
			case c == 0:
				if missing++; missing < 5 {
					t.Errorf("update %s=%d is missing", w, k)
				}
			case c > 1 && exact:
				if twice++; twice < 5 {
					t.Errorf("update %s=%d is in the sink %d times", w, k, c)
				}
			}
		}
	}
	for l := range seen {
		w, _, _ := strings.Cut(l, "\t")
		if oracle[w] == 0 {
			t.Fatalf("update %q is of a word not in the input", l)
		}
	}
	t.Logf("%d update lines for %d words in the input: %d missing, %d more than once", len(lines), total, missing, twice)
	if missing > 0 || twice > 0 || exact && int64(len(lines)) != total {
		t.Fatalf("the sink is not what the input says: %d missing, %d twice, %d lines for %d words", missing, twice, len(lines), total)
	}
}

// serverTLS writes a CA and a certificate for 127.0.0.1 signed by it into
// dir, and returns the files: the CA, the certificate and its key.
func serverTLS(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, srvKey := newKey(), newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ackflow e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(crand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(crand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "PRIVATE KEY", keyDER)
}
