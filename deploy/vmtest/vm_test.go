// Package vmtest tests deploy/vm: three NATS servers started from
// nats-server.conf, ackflow workers started with the command line that
// ackflow-worker.service and ackflow-worker.env make, and the operator
// commands, each as its NATS user with its certificate. It holds only
// tests.
package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cli"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/goleak"
)

// TestThreeVMs runs the deployment of deploy/vm on this machine: three NATS
// servers from nats-server.conf, three workers from the unit and its
// environment file (the worker user, TLS, three replicas), and the operator
// commands as the operator user. A topology runs to its end, another is
// rebalanced and killed, each user can do what its role needs and not
// what it does not, and SIGTERM (the unit's stop signal) makes every worker
// leave the cluster and exit 0 within the unit's stop timeout.
func TestThreeVMs(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the VM deployment is for Linux; the test signals itself with SIGTERM")
	}
	t.Cleanup(func() { goleak.VerifyNone(t) })
	dir := t.TempDir()
	p := newPKI(t, filepath.Join(dir, "tls"))
	c := startCluster(t, p, dir)
	counts := &counts{byTopology: map[string]map[string]int64{}}
	topos := testTopologies(counts)
	op := &operatorCLI{topos: topos, flags: []string{"--nats", c.urls, "--tls-ca", p.ca, "--tls-cert", p.cert("operator"), "--tls-key", p.key("operator")}}

	eventually(t, time.Minute, "ackflow health as the operator", func() error {
		_, err := op.run("health", "--timeout", "2s")
		return err
	})
	top := t
	var ws []*workerProc
	var metricsAddrs []string
	for i, port := range freePorts(t, 3) {
		name, addr := fmt.Sprintf("vm%d", i+1), fmt.Sprintf("127.0.0.1:%d", port)
		metricsAddrs = append(metricsAddrs, addr)
		args := workerArgs(t, map[string]string{
			"ACKFLOW_METRICS":   addr,
			"ACKFLOW_NATS":      c.urls,
			"ACKFLOW_NAME":      name,
			"ACKFLOW_TLS_CA":    p.ca,
			"ACKFLOW_TLS_CERT":  p.cert("worker"),
			"ACKFLOW_TLS_KEY":   p.key("worker"),
			"ACKFLOW_LOG_LEVEL": "warn",
		})
		ws = append(ws, startWorker(t, topos, name, args))
	}
	for _, w := range ws {
		eventually(t, 30*time.Second, "ackflow health --worker "+w.name, func() error {
			_, err := op.run("health", "--worker", w.name, "--timeout", "1s")
			return err
		})
	}

	const n = 4000
	t.Run("submit runs a topology to its end", func(t *testing.T) {
		out, err := op.run("submit", "vmcount", "--guarantee", "exactly-once", "--checkpoint-every", "200ms",
			"--set", fmt.Sprintf("n=%d", n), "--set", "pace=40ms")
		if err != nil {
			t.Fatalf("submit: %v\n%s", err, out)
		}
		eventually(t, 2*time.Minute, "vmcount finished", func() error { return op.state("vmcount", cluster.StateFinished) })
		out, err = op.run("list")
		if err != nil || !strings.Contains(out, "vmcount") || !strings.Contains(out, "finished") {
			t.Fatalf("list: %v\n%s", err, out)
		}
	})

	t.Run("rebalance and kill a running topology", func(t *testing.T) {
		out, err := op.run("submit", "vmslow", "--guarantee", "exactly-once", "--checkpoint-every", "200ms",
			"--set", "n=1000000000", "--set", "pace=20ms")
		if err != nil {
			t.Fatalf("submit: %v\n%s", err, out)
		}
		out, err = op.run("rebalance", "vmslow", "--parallelism", "count=3")
		if err != nil || !strings.Contains(out, "count[2]") {
			t.Fatalf("rebalance: %v\n%s", err, out)
		}
		out, err = op.run("status", "vmslow")
		if err != nil || !strings.Contains(out, "running") {
			t.Fatalf("status: %v\n%s", err, out)
		}
		// A worker that runs tasks and is not the topology's leader leaves:
		// its tasks move (a failover, which the leader measures), and it
		// comes back.
		var st struct {
			Leader string `json:"leader"`
			Tasks  []struct {
				Owner string `json:"owner"`
			} `json:"tasks"`
		}
		if out, err = op.run("status", "vmslow", "--json"); err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Leader == "" {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		i := slices.IndexFunc(ws, func(w *workerProc) bool {
			return w.name != st.Leader && slices.ContainsFunc(st.Tasks, func(task struct {
				Owner string `json:"owner"`
			}) bool {
				return task.Owner == w.name
			})
		})
		if i < 0 {
			t.Fatalf("no worker but the leader %s runs tasks of vmslow:\n%s", st.Leader, out)
		}
		ws[i].stop(t)
		rest := slices.Delete(slices.Clone(metricsAddrs), i, i+1)
		checkDashboardScraped(t, rest, "vmslow")
		ws[i] = startWorker(top, topos, ws[i].name, ws[i].args) // lives past this subtest
		eventually(t, 30*time.Second, "ackflow health --worker "+ws[i].name, func() error {
			_, err := op.run("health", "--worker", ws[i].name, "--timeout", "1s")
			return err
		})
		out, err = op.run("kill", "vmslow", "--wait", "1m")
		if err != nil || !strings.Contains(out, "vmslow is killed") {
			t.Fatalf("kill: %v\n%s", err, out)
		}
	})

	// The probes below are refused on purpose; the servers log each refusal,
	// and any other refusal they log fails the test at its end.
	var expected []*regexp.Regexp
	t.Run("each user may do what its role needs and no more", func(t *testing.T) {
		expected = checkPermissions(t, c, p)
	})

	t.Run("SIGTERM makes the workers leave and exit 0", func(t *testing.T) {
		timeout := stopTimeout(t)
		for _, w := range ws {
			if !w.listening() {
				t.Fatalf("worker %s is not running or does not handle SIGTERM yet; not sending it:\n%s", w.name, w.out)
			}
		}
		self, err := os.FindProcess(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if err := self.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(timeout)
		for _, w := range ws {
			select {
			case err := <-w.done:
				w.done = nil
				if err != nil {
					t.Errorf("worker %s exited with %v (systemd would restart it)", w.name, err)
				}
			case <-deadline:
				t.Fatalf("worker %s still runs %v after SIGTERM; systemd would SIGKILL it", w.name, timeout)
			}
		}
		// Leaving deletes the member's entry; an expired one would mean it
		// did not leave.
		nc := connect(t, c.urls, p, "worker", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, cluster.MembersBucket)
		if err != nil {
			t.Fatal(err)
		}
		if keys, err := kv.Keys(ctx); !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatalf("members after SIGTERM: %q, %v; want none", keys, err)
		}
	})

	counts.expectOnce(t, "vmcount", n)
	if len(expected) == 0 {
		return // the permissions subtest failed; its refusals are unknown
	}
	seen := map[*regexp.Regexp]bool{}
	for _, v := range c.violations() {
		ok := false
		for _, e := range expected {
			if e.MatchString(v) {
				ok, seen[e] = true, true
			}
		}
		if !ok {
			t.Errorf("a refusal that no probe caused: %s", v)
		}
	}
	for _, e := range expected {
		if !seen[e] {
			t.Errorf("no server logged a refusal like %q", e)
		}
	}
}

// checkPermissions probes what each user may do and returns substrings of
// the refusals the servers log for the probes.
func checkPermissions(t *testing.T, c *natsCluster, p *pki) []*regexp.Regexp {
	opErrs, wkErrs := make(chan error, 16), make(chan error, 16)
	opc := connect(t, c.urls, p, "operator", opErrs)
	wkc := connect(t, c.urls, p, "worker", wkErrs)
	wkc2 := connect(t, c.urls, p, "worker", wkErrs)
	const task = "ackflow.probe.task.0"

	// A worker sends task frames to another worker. The two may be on
	// different servers, which learn of the subscription a moment later.
	sub, err := wkc2.SubscribeSync(task)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a worker's frame on "+task, func() error {
		if err := wkc.Publish(task, []byte("frame")); err != nil {
			return err
		}
		_, err := sub.NextMsg(200 * time.Millisecond)
		return err
	})
	for {
		if _, err := sub.NextMsg(200 * time.Millisecond); err != nil {
			break // every frame of the loop is read
		}
	}

	// The operator cannot: the server refuses the publish.
	if err := opc.Publish(task, []byte("frame")); err != nil {
		t.Fatal(err)
	}
	expectRefusal(t, opc, opErrs, `Permissions Violation for Publish to "`+task+`"`)
	if _, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the operator's frame on %s arrived", task)
	}
	// Nor listen to the cluster's frames.
	if _, err := opc.SubscribeSync("ackflow.>"); err != nil {
		t.Fatal(err)
	}
	expectRefusal(t, opc, opErrs, `Permissions Violation for Subscription to "ackflow.>"`)
	// Nor read checkpoints.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ojs, err := jetstream.New(opc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.ObjectStore(ctx, "ackflow_ckpt_vmcount"); err == nil {
		t.Fatal("the operator opened the checkpoints of vmcount")
	}
	expectRefusal(t, opc, opErrs, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.OBJ_ackflow_ckpt_vmcount"`)

	// A worker cannot delete a stream.
	wjs, err := jetstream.New(wkc)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := wjs.DeleteStream(ctx2, "ackflow_vmcount_dlq"); err == nil {
		t.Fatal("a worker deleted the dead-letter stream of vmcount")
	}
	expectRefusal(t, wkc, wkErrs, `Permissions Violation for Publish to "$JS.API.STREAM.DELETE.ackflow_vmcount_dlq"`)
	select {
	case err := <-wkErrs:
		t.Fatalf("the worker's connection reported %v", err)
	default:
	}

	// A certificate from the CA whose subject names no user gets nowhere,
	// nor does a client without a certificate.
	if nc, err := nats.Connect(c.urls, nats.RootCAs(p.ca), nats.ClientCert(p.cert("stranger"), p.key("stranger")), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("a client with an unmapped certificate connected")
	}
	if nc, err := nats.Connect(c.urls, nats.RootCAs(p.ca), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	}

	// The admin of the system account reaches the servers' system
	// services.
	adm := connect(t, c.urls, p, "admin", nil)
	if _, err := adm.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("the system account's user gets no answer from the servers: %v", err)
	}

	checkRouteRefused(t, c, p)
	return []*regexp.Regexp{
		regexp.MustCompile(`CN=ackflow-operator,O=ackflow" - Publish Violation - Subject "` + regexp.QuoteMeta(task) + `"`),
		regexp.MustCompile(`CN=ackflow-operator,O=ackflow" - Subscription Violation - Subject "ackflow\.>"`),
		regexp.MustCompile(`CN=ackflow-operator,O=ackflow" - Publish Violation - Subject "\$JS\.API\.STREAM\.INFO\.OBJ_ackflow_ckpt_vmcount"`),
		regexp.MustCompile(`CN=ackflow-worker,O=ackflow" - Publish Violation - Subject "\$JS\.API\.STREAM\.DELETE\.ackflow_vmcount_dlq"`),
		regexp.MustCompile(`cid:\d+ - authentication error`), // the stranger, whose certificate names no user
		regexp.MustCompile(`cid:\d+ - TLS handshake error: tls: client didn't provide a certificate`),
		regexp.MustCompile(`rid:\d+ - authentication error`), // the intruder's routes
	}
}

// checkRouteRefused starts a fourth server from the same file, but with a
// worker's certificate for its routes: the cluster must not take it in,
// because the certificate names none of the route URLs.
func checkRouteRefused(t *testing.T, c *natsCluster, p *pki) {
	t.Helper()
	dir := t.TempDir()
	conf := nodeConfig(t, c.conf, 1, p.dir, filepath.Join(dir, "store"), c.routePorts)
	head, routes, ok := strings.Cut(conf, "\ncluster {")
	if !ok {
		t.Fatalf("%s has no cluster block", confPath)
	}
	head = strings.Replace(head, "server_name: vm1", "server_name: intruder", 1)
	routes = strings.Replace(routes, fmt.Sprintf("listen: 127.0.0.1:%d", c.routePorts[0]), "listen: 127.0.0.1:-1", 1)
	routes = strings.ReplaceAll(routes, "/server.pem", "/worker.pem")
	routes = strings.ReplaceAll(routes, "/server-key.pem", "/worker-key.pem")
	intruder, log := startServer(t, filepath.Join(dir, "intruder.conf"), head+"\ncluster {"+routes)
	// A route is counted while its handshake runs, before the cluster
	// refuses it: wait for the refusals, then the intruder must hold no
	// route for two seconds, and no server of the cluster may know it.
	eventually(t, 10*time.Second, "the cluster refuses the intruder's routes", func() error {
		if len(log.matching("Route Error 'Authorization Violation'")) == 0 {
			return fmt.Errorf("no refusal in the intruder's log yet:\n%s", log)
		}
		return nil
	})
	// The intruder keeps retrying, and each retry is counted for the few
	// milliseconds its handshake lasts: a route held is one seen in three
	// readings in a row, 100 ms apart.
	held := 0
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		if n := intruder.NumRoutes(); n == 0 {
			held = 0
		} else if held++; held == 3 {
			t.Fatalf("a server with a worker's certificate holds %d routes into the cluster after they were refused", n)
		}
	}
	for i, s := range c.servers {
		rz, err := s.Routez(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rz.Routes {
			if r.RemoteName == "intruder" {
				t.Fatalf("vm%d has a route to the server with a worker's certificate", i+1)
			}
		}
	}
	intruder.Shutdown()
	intruder.WaitForShutdown()
}

// expectRefusal waits for the server's refusal on nc's error handler.
func expectRefusal(t *testing.T, nc *nats.Conn, errs <-chan error, want string) {
	t.Helper()
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the server said %q, want %q", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no refusal %q within 5s", want)
	}
}

// connect connects as user with its certificate, as the ackflow commands
// do with --tls-ca, --tls-cert and --tls-key; the connection's
// asynchronous errors go to errs. The test's end closes it.
func connect(t *testing.T, urls string, p *pki, user string, errs chan<- error) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Name("vmtest " + user), nats.RootCAs(p.ca), nats.ClientCert(p.cert(user), p.key(user))}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// operatorCLI runs the operator commands of the ackflow command line in
// this process, with the operator's NATS flags.
type operatorCLI struct {
	topos cli.Topologies
	flags []string
}

func (o *operatorCLI) run(args ...string) (string, error) {
	root := cli.NewRoot(o.topos)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, o.flags...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// state checks the state of a submitted topology with ackflow status.
func (o *operatorCLI) state(topo, want string) error {
	out, err := o.run("status", topo, "--json")
	if err != nil {
		return err
	}
	var st struct {
		Topology cluster.Spec `json:"topology"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return fmt.Errorf("status --json: %w: %s", err, out)
	}
	if st.Topology.State != want {
		return fmt.Errorf("%s is %s", topo, st.Topology.State)
	}
	return nil
}

// workerProc is `ackflow worker` running in this process.
type workerProc struct {
	name   string
	args   []string
	out    *testbuf.Buffer
	done   chan error // nil once received
	cancel context.CancelFunc
}

// stop stops the worker as Ctrl-C does: it leaves the cluster.
func (w *workerProc) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	if err := <-w.done; err != nil {
		t.Fatalf("worker %s stopped with %v", w.name, err)
	}
	w.done = nil
}

func startWorker(t *testing.T, topos cli.Topologies, name string, args []string) *workerProc {
	t.Helper()
	root := cli.NewRoot(topos)
	w := &workerProc{name: name, args: args, out: &testbuf.Buffer{}, done: make(chan error, 1)}
	root.SetOut(w.out)
	root.SetErr(w.out)
	root.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() { w.done <- root.ExecuteContext(ctx) }()
	// Normally SIGTERM stops it; a test that failed before stops it so,
	// and shows what it logged.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of worker %s:\n%s", name, tail(w.out.String(), 60))
		}
		cancel()
		if w.done != nil {
			if err := <-w.done; err != nil {
				t.Errorf("worker %s: %v", name, err)
			}
		}
	})
	return w
}

// listening reports whether the worker runs and handles SIGTERM: it says
// it is joining after it starts to.
func (w *workerProc) listening() bool {
	if w.done == nil {
		return false // stopped
	}
	select {
	case err := <-w.done:
		w.done <- err
		return false
	default:
	}
	return strings.Contains(w.out.String(), "joining the cluster")
}

// workerCommand parses `ackflow worker` with args without running it.
func workerCommand(args []string) (*cobra.Command, error) {
	cmd, rest, err := cli.NewRoot(testTopologies(nil)).Find(args)
	if err != nil {
		return nil, err
	}
	if cmd.Name() != "worker" {
		return nil, fmt.Errorf("%q runs ackflow %s, not worker", args, cmd.Name())
	}
	return cmd, cmd.ParseFlags(rest)
}

// testTopologies are the topologies of the test's worker binary. vmcount
// counts n numbers once each in keyed state and finishes; vmslow has the
// same shape and is submitted with an n it never reaches. pace slows the
// spout so that a topology runs for a while.
func testTopologies(c *counts) cli.Topologies {
	build := func(name string) cli.Build {
		return func(s cli.Settings) (*topology.Topology, error) {
			if err := s.Only("n", "pace"); err != nil {
				return nil, err
			}
			n, err := s.Int("n", 1000)
			if err != nil {
				return nil, err
			}
			pace, err := s.Duration("pace", 0)
			if err != nil {
				return nil, err
			}
			b := topology.NewBuilder(name)
			b.Spout("numbers", func() topology.Spout {
				return &paced{Sequence: &sources.Sequence{N: int64(n), PerNext: 50, Make: func(i int64) topology.Values { return topology.Values{i} }}, pause: pace}
			}, 1).Outputs("n")
			b.Bolt("count", func() topology.Bolt { return &counter{topo: name, counts: c} }, 2).KeyedState().
				Input("numbers", topology.Fields("n"))
			return b.Build()
		}
	}
	return cli.Topologies{"vmcount": build("vmcount"), "vmslow": build("vmslow")}
}

// paced is a Sequence that pauses before each batch.
type paced struct {
	*sources.Sequence
	pause time.Duration
}

func (p *paced) Next(ctx context.Context) error {
	time.Sleep(p.pause)
	return p.Sequence.Next(ctx)
}

// counter counts every number it sees in keyed state, which checkpoints
// carry, and adds its counts to the test's when its task ends.
type counter struct {
	topo   string
	counts *counts
	seen   *topology.Counters
	out    topology.Collector
}

func (k *counter) Prepare(tc topology.TaskContext, out topology.Collector) error {
	k.out, k.seen = out, tc.State.Counters("seen")
	return nil
}

func (k *counter) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	k.seen.Add(strconv.FormatInt(n, 10), 1)
	k.out.Ack(in)
}

func (k *counter) Cleanup() error {
	if k.counts != nil {
		k.counts.add(k.topo, k.seen)
	}
	return nil
}

// counts are what the counters of every task counted, by topology.
type counts struct {
	mu         sync.Mutex
	byTopology map[string]map[string]int64
}

func (c *counts) add(topo string, seen *topology.Counters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byTopology[topo]
	if m == nil {
		m = map[string]int64{}
		c.byTopology[topo] = m
	}
	seen.Range(func(key string, n int64) bool {
		m[key] += n
		return true
	})
}

// expectOnce checks that topo counted 0..n-1 once each.
func (c *counts) expectOnce(t *testing.T, topo string, n int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byTopology[topo]
	for i := range n {
		if got := m[strconv.FormatInt(i, 10)]; got != 1 {
			t.Fatalf("%s counted %d %d times, want once", topo, i, got)
		}
	}
	if len(m) != int(n) {
		t.Fatalf("%s counted %d numbers, want %d", topo, len(m), n)
	}
}

// eventually retries f until it succeeds or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
