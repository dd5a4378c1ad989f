//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
)

// The docker fault suite: the images of deploy/ (built here from this
// checkout, FROM scratch), the compose project of deploy/docker-compose.yml
// (three NATS servers in a JetStream cluster, three workers), and the word
// count reading a JetStream stream and writing every count update to
// another, under one fault per case, for both guarantees. Every case checks
// the output stream against the input's words: nothing lost, and under
// exactly-once nothing twice. Everything the suite creates (containers,
// networks, volumes, images) is removed at the end, and the suite checks
// that nothing is left.

// TestDockerFaults runs the fault cases; it is skipped, saying so, where
// docker does not answer.
func TestDockerFaults(t *testing.T) {
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("docker does not answer (docker info: %v %s): the docker fault suite needs Docker Engine", err, firstLine(out))
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose is not installed: the docker fault suite needs it")
	}
	d := startDocker(t)
	faults := []dockerFault{
		{"kill-and-restart", killAndRestart},
		{"pause-past-lease", pausePastLease},
		{"partition", partition},
		{"restart-nats-node", restartNATSNode},
		{"kill-two-of-three", killTwo},
	}
	start := time.Now()
	for _, g := range []string{"at-least-once", "exactly-once"} {
		for _, f := range faults {
			t.Run(g+"/"+f.name, func(t *testing.T) { d.runCase(t, g, f) })
		}
	}
	t.Run("the compose demo of deploy/README.md", func(t *testing.T) { d.demo(t) })
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "guarantee\tfault\tlines in\twords in\trecords out\tfaults\tlost\tduplicated\trecovery after fault / after healing")
	for _, line := range d.report {
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	t.Logf("the suite took %v:\n%s", time.Since(start).Round(time.Second), b.String())
}

// demo runs what `docker-compose -f deploy/docker-compose.yml up` runs
// after the servers and workers: the one-shot services create the stream
// COUNTS and submit the word count of the bundled text, exactly-once;
// every count update of every word must be in COUNTS once.
func (d *dockerSuite) demo(t *testing.T) {
	d.t, d.c.t = t, t
	d.healthy()
	d.compose(5*time.Minute, "up", "-d", "streams", "submit")
	for _, svc := range []string{"streams", "submit"} {
		id := d.container(svc)
		if code := strings.TrimSpace(d.docker("wait", id)); code != "0" {
			fatalf(t, "the %s service exited with %s:\n%s%s", svc, code, d.docker("logs", id), d.workerLogs())
		}
	}
	d.c.await("the word count finishes", 4*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	oracle := map[string]int64{}
	for _, w := range wordcount.SplitWords(string(wordcount.Bundled())) {
		oracle[w]++
	}
	nc, js := d.connect()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, total := readOutput(t, ctx, js, "COUNTS")
	lost, missing, dup := compareOutput(oracle, got)
	t.Logf("COUNTS holds %d count updates of %d words (%d distinct); lost %d, updates missing %d, duplicated %d", total, len(wordcount.SplitWords(string(wordcount.Bundled()))), len(oracle), lost, missing, dup)
	if lost+missing+dup > 0 {
		fatalf(t, "the demo's output is not exactly once")
	}
	// w1 publishes its metrics on the host, as deploy/README.md shows.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", d.metrics))
	if err != nil {
		fatalf(t, "w1's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !regexp.MustCompile(`(?m)^ackflow_emitted_total\{[^}]*topology="wordcount"`).Match(body) {
		fatalf(t, "w1's /metrics has no ackflow_emitted_total series (%v):\n%.2000s", err, body)
	}
}

// lastFatal is the message of the last fatalf, so that a failed case's
// row in the suite's table says why: the table is printed last, where a
// CI excerpt of the output's tail still shows it.
var lastFatal atomic.Value

// fatalf records the failure's message, then fails the test.
func fatalf(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	lastFatal.Store(msg)
	t.Fatal(msg)
}

type dockerFault struct {
	name   string
	inject func(t *testing.T, d *dockerSuite, c *dockerCase)
}

// dockerSuite is the images and the compose project.
type dockerSuite struct {
	root    *testing.T // the suite's test, for the cleanups
	t       *testing.T // the running case's
	dir     string
	tag     string
	project string
	port    int      // nats1's client port on the host
	metrics int      // w1's metrics port on the host
	files   []string // compose files
	cases   int
	report  []string     // a line per case, for the table at the end
	c       *testCluster // for ackflow status against the project
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		fatalf(t, "%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// startDocker builds the binaries and images under a tag of this run and
// brings the compose project up; the cleanups take everything down again
// and check that nothing is left.
func startDocker(t *testing.T) *dockerSuite {
	d := &dockerSuite{root: t, t: t, dir: t.TempDir(), tag: fmt.Sprintf("e2e-%d", rand.Uint32())}
	d.project = "ackflowe2e" + strings.TrimPrefix(d.tag, "e2e-")
	build := filepath.Join(d.dir, "build")
	root, err := filepath.Abs("..")
	if err != nil {
		fatalf(t, "%v", err)
	}
	started := time.Now()
	env := []string{"CGO_ENABLED=0", "GOBIN=" + build}
	run(t, 10*time.Minute, env, "go", "build", "-C", root, "-trimpath", "-o", filepath.Join(build, "ackflow"), "./cmd/ackflow")
	run(t, 10*time.Minute, env, "go", "build", "-C", root, "-trimpath", "-o", filepath.Join(build, "nats-server"), "github.com/nats-io/nats-server/v2")
	// The official NATS CLI, a real client of the streams.
	run(t, 10*time.Minute, env, "go", "install", "github.com/nats-io/natscli/nats@v0.5.0")
	t.Cleanup(d.removeImages) // registered first: runs after the project is down
	for img, dockerfile := range map[string]string{"ackflow": "Dockerfile.ackflow", "ackflow-nats": "Dockerfile.nats"} {
		run(t, 5*time.Minute, nil, "docker", "build", "-q", "-t", img+":"+d.tag, "-f", filepath.Join(root, "deploy", dockerfile), build)
	}
	t.Logf("binaries and images %s built in %v", d.tag, time.Since(started).Round(time.Second))
	// The tests restart what they kill, so nothing restarts on its own.
	override := filepath.Join(d.dir, "no-restart.yml")
	var b strings.Builder
	b.WriteString("version: \"3.8\"\nservices:\n")
	for _, s := range []string{"nats1", "nats2", "nats3", "w1", "w2", "w3"} {
		fmt.Fprintf(&b, "  %s:\n    restart: \"no\"\n", s)
	}
	if err := os.WriteFile(override, []byte(b.String()), 0o644); err != nil {
		fatalf(t, "%v", err)
	}
	d.files = []string{filepath.Join(root, "deploy", "docker-compose.yml"), override}
	t.Cleanup(d.down)
	started = time.Now()
	d.up()
	d.healthy()
	t.Logf("compose project %s up and healthy in %v", d.project, time.Since(started).Round(time.Second))
	d.c = &testCluster{t: t, url: fmt.Sprintf("nats://127.0.0.1:%d", d.port), dir: d.dir, moreLogs: d.workerLogs}
	return d
}

// up brings the servers and workers up on host ports picked just before:
// a picked port is free only until something else binds it (the other e2e
// process starts servers meanwhile), so a port docker finds taken is
// picked again rather than failing the suite.
func (d *dockerSuite) up() {
	d.t.Helper()
	for attempt := 1; ; attempt++ {
		d.port, d.metrics = freePort(d.t), freePort(d.t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "docker-compose", d.composeArgs("up", "-d", "nats1", "nats2", "nats3", "w1", "w2", "w3")...)
		cmd.Env = append(os.Environ(), d.env()...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			return
		}
		if attempt < 3 && portTaken(string(out)) {
			d.t.Logf("host port %d or %d was taken before docker bound it; picking others:\n%s", d.port, d.metrics, out)
			continue
		}
		fatalf(d.t, "docker-compose up: %v\n%s", err, out)
	}
}

// portTaken tells whether docker's output says a host port was in use.
func portTaken(out string) bool {
	return strings.Contains(out, "port is already allocated") || strings.Contains(out, "address already in use")
}

// workerLogs returns the last lines of each worker container's log, for a
// failure message: a submit that gives up or a status that never comes
// says why only there. It never fails the test itself, so that it cannot
// hide the failure it is called for.
func (d *dockerSuite) workerLogs() string {
	var b strings.Builder
	for _, w := range []string{"w1", "w2", "w3"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "docker-compose", d.composeArgs("logs", "--no-color", "--tail", "40", w)...)
		cmd.Env = append(os.Environ(), d.env()...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "\n--- %s: docker-compose logs: %v\n", w, err)
		}
		fmt.Fprintf(&b, "\n--- %s (last lines)\n%s", w, out)
	}
	return b.String()
}

func (d *dockerSuite) env() []string {
	return []string{"ACKFLOW_TAG=" + d.tag, fmt.Sprintf("ACKFLOW_NATS_PORT=%d", d.port), fmt.Sprintf("ACKFLOW_METRICS_PORT=%d", d.metrics)}
}

func (d *dockerSuite) compose(timeout time.Duration, args ...string) string {
	d.t.Helper()
	return run(d.t, timeout, d.env(), "docker-compose", d.composeArgs(args...)...)
}

// composeArgs are the arguments of docker-compose for this project.
func (d *dockerSuite) composeArgs(args ...string) []string {
	full := []string{"-p", d.project}
	for _, f := range d.files {
		full = append(full, "-f", f)
	}
	return append(full, args...)
}

// container returns the ID of a service's container.
func (d *dockerSuite) container(service string) string {
	d.t.Helper()
	id := strings.TrimSpace(d.compose(time.Minute, "ps", "-q", service))
	if id == "" {
		fatalf(d.t, "service %s has no container", service)
	}
	return id
}

func (d *dockerSuite) docker(args ...string) string {
	d.t.Helper()
	return run(d.t, 2*time.Minute, nil, "docker", args...)
}

// healthy starts whatever is stopped or paused and waits until every
// service's healthcheck passes.
func (d *dockerSuite) healthy() {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, s := range []string{"nats1", "nats2", "nats3", "w1", "w2", "w3"} {
		id := d.container(s)
		for {
			state := strings.TrimSpace(d.docker("inspect", "-f", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", id))
			switch {
			case state == "running healthy":
			case strings.HasPrefix(state, "paused"):
				d.docker("unpause", id)
				continue
			case strings.HasPrefix(state, "exited"), strings.HasPrefix(state, "created"):
				d.docker("start", id)
				continue
			default:
				if time.Now().After(deadline) {
					fatalf(d.t, "%s is %q after 2 minutes:\n%s", s, state, d.docker("logs", "--tail", "30", id))
				}
				time.Sleep(500 * time.Millisecond)
				continue
			}
			break
		}
	}
}

// down removes the project's containers, networks and volumes and checks
// that none is left.
func (d *dockerSuite) down() {
	full := []string{"-p", d.project}
	for _, f := range d.files {
		full = append(full, "-f", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker-compose", append(full, "down", "-v", "--remove-orphans", "-t", "2")...)
	cmd.Env = append(os.Environ(), d.env()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		d.root.Errorf("docker-compose down: %v\n%s", err, out)
	}
	label := "label=com.docker.compose.project=" + d.project
	for _, what := range [][]string{{"ps", "-aq", "--filter", label}, {"network", "ls", "-q", "--filter", label}, {"volume", "ls", "-q", "--filter", label}} {
		out, err := exec.Command("docker", what...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			d.root.Errorf("docker %s after the suite: %v %s", strings.Join(what, " "), err, out)
		}
	}
}

// removeImages removes the images of this run and checks they are gone.
func (d *dockerSuite) removeImages() {
	for _, img := range []string{"ackflow:" + d.tag, "ackflow-nats:" + d.tag} {
		exec.Command("docker", "rmi", "-f", img).Run()
		if out, _ := exec.Command("docker", "images", "-q", img).Output(); strings.TrimSpace(string(out)) != "" {
			d.root.Errorf("image %s is still there after the suite", img)
		}
	}
}

// dockerCase is one run of the word count.
type dockerCase struct {
	n          int
	in, out    string // streams
	subject    string // of the output
	lines      int
	oracle     map[string]int64
	before     float64 // records/s before the fault
	recoveries []time.Duration
	faults     int
}

// runCase feeds the input, submits, injects the fault, waits for the end
// and checks the output.
func (d *dockerSuite) runCase(t *testing.T, guarantee string, f dockerFault) {
	d.t = t
	lastFatal.Store("")
	t.Cleanup(func() {
		if t.Failed() {
			why, _ := lastFatal.Load().(string)
			d.report = append(d.report, fmt.Sprintf("%s\t%s\tFAILED: %.300s", guarantee, f.name, strings.Join(strings.Fields(why), " ")))
		}
	})
	d.healthy()
	d.cases++
	c := &dockerCase{n: d.cases, in: fmt.Sprintf("IN%d", d.cases), out: fmt.Sprintf("OUT%d", d.cases), subject: fmt.Sprintf("out.%d", d.cases)}
	d.c.t = t
	if list := d.c.cli("list"); strings.Contains(list, "wordcount  running") || strings.Contains(list, "wordcount  killing") {
		// An earlier case failed midway.
		d.c.cli("kill", "wordcount", "--wait", "1m")
	}
	nc, js := d.connect()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, s := range []jetstream.StreamConfig{
		{Name: c.in, Subjects: []string{fmt.Sprintf("in.%d", c.n)}, Replicas: 3},
		{Name: c.out, Subjects: []string{c.subject}, Replicas: 3, Duplicates: 5 * time.Minute},
	} {
		if _, err := js.CreateStream(ctx, s); err != nil {
			fatalf(t, "creating stream %s: %v", s.Name, err)
		}
	}
	if c.n == 1 {
		d.feedWithNATSCLI(t, js, c)
	} else {
		feedWithGo(t, ctx, js, c)
	}
	const rate = 600
	d.c.cli("submit", "wordcount", "--guarantee", guarantee, "--set", "in-stream="+c.in, "--set", "out="+c.subject,
		"--set", fmt.Sprint("rate=", rate), "--wait", "60s")
	st := d.c.await("the word count runs", time.Minute, func(s *clusterStatus) bool { return s.running() && s.Topology.State == "running" })
	c.before = d.c.rate(2 * time.Second)
	t.Logf("%d lines in stream %s; generation %d runs at %.0f records/s", c.lines, c.in, st.gen(), c.before)
	f.inject(t, d, c)
	d.c.await("the word count finishes", 4*time.Minute, func(s *clusterStatus) bool { return s.Topology.State == "finished" })
	got, total := readOutput(t, ctx, js, c.out)
	lost, missing, dup := compareOutput(c.oracle, got)
	if guarantee == "exactly-once" {
		lost += missing
	}
	var want int64
	for _, n := range c.oracle {
		want += n
	}
	rec := make([]string, len(c.recoveries))
	for i, r := range c.recoveries {
		rec[i] = r.Round(time.Millisecond).String()
	}
	t.Logf("%s, %s: records in %d lines (%d words), records out %d, faults injected %d, lost %d, duplicated %d (updates missing %d), recovery after fault / after healing: %s",
		guarantee, f.name, c.lines, want, total, c.faults, lost, dup, missing, strings.Join(rec, " "))
	d.report = append(d.report, fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", guarantee, f.name, c.lines, want, total, c.faults, lost, dup, strings.Join(rec, " ")))
	if lost > 0 || guarantee == "exactly-once" && dup > 0 {
		fatalf(t, "lost %d, duplicated %d", lost, dup)
	}
}

// connect connects to nats1 through its published port.
func (d *dockerSuite) connect() (*nats.Conn, jetstream.JetStream) {
	return d.c.connect()
}

// feedWithNATSCLI publishes the input with the NATS CLI in the nats1
// container: message k is "alpha beta k".
func (d *dockerSuite) feedWithNATSCLI(t *testing.T, js jetstream.JetStream, c *dockerCase) {
	c.lines = 12000
	d.compose(5*time.Minute, "exec", "-T", "nats1", "/nats", "-s", "nats://127.0.0.1:4222", "pub", fmt.Sprintf("in.%d", c.n),
		"alpha beta {{Count}}", "--count", fmt.Sprint(c.lines), "--quiet")
	c.oracle = map[string]int64{"alpha": int64(c.lines), "beta": int64(c.lines)}
	for k := 1; k <= c.lines; k++ {
		c.oracle[fmt.Sprint(k)] = 1
	}
	waitMessages(t, js, c.in, c.lines)
}

// feedWithGo publishes random lines of words with the Go client.
func feedWithGo(t *testing.T, ctx context.Context, js jetstream.JetStream, c *dockerCase) {
	c.lines = 12000
	rng := rand.New(rand.NewPCG(uint64(c.n), 3))
	vocab := make([]string, 3000)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%x", rng.Uint32()%0xfffff)
	}
	c.oracle = map[string]int64{}
	subject := fmt.Sprintf("in.%d", c.n)
	lines := make([]*nats.Msg, c.lines)
	futures := make([]jetstream.PubAckFuture, c.lines)
	for i := range lines {
		words := make([]string, 1+rng.IntN(8))
		for j := range words {
			words[j] = vocab[rng.IntN(len(vocab))]
			c.oracle[words[j]]++
		}
		// A message ID per line lets a publish be repeated without
		// storing the line twice.
		lines[i] = &nats.Msg{Subject: subject, Data: []byte(strings.Join(words, " ")), Header: nats.Header{jetstream.MsgIDHeader: []string{fmt.Sprintf("%d-%d", c.n, i)}}}
		futures[i] = publishAsync(t, ctx, js, lines[i])
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		fatalf(t, "%v", "the input was not stored in time")
	}
	// A cluster busy with the previous case's recovery can time out an
	// ack; such lines are published again, one at a time.
	for i, f := range futures {
		select {
		case <-f.Ok():
			continue
		case <-f.Err():
		}
		if _, err := js.PublishMsg(ctx, lines[i]); err != nil {
			fatalf(t, "input line %d was not stored: %v", i, err)
		}
	}
	waitMessages(t, js, c.in, c.lines)
}

// publishAsync publishes msg asynchronously, waiting while the client is
// stalled (sinks.PublishAsync), which a three-node cluster recovering from
// the previous case's fault can make it for long.
func publishAsync(t *testing.T, ctx context.Context, js jetstream.JetStream, msg *nats.Msg) jetstream.PubAckFuture {
	f, err := sinks.PublishAsync(ctx, js, msg)
	if err != nil {
		fatalf(t, "publishing input to %s: %v", msg.Subject, err)
	}
	return f
}

func waitMessages(t *testing.T, js jetstream.JetStream, stream string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s, err := js.Stream(context.Background(), stream)
		if err == nil {
			if info, err := s.Info(context.Background()); err == nil && info.State.Msgs >= uint64(n) {
				return
			}
		}
		if time.Now().After(deadline) {
			fatalf(t, "stream %s does not hold %d messages after a minute: %v", stream, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readOutput reads every (word, count) update of the output stream.
func readOutput(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) (map[string]int, int) {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		fatalf(t, "%v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		fatalf(t, "%v", err)
	}
	total := int(info.State.Msgs)
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		fatalf(t, "%v", err)
	}
	got := map[string]int{}
	it, err := cons.Messages()
	if err != nil {
		fatalf(t, "%v", err)
	}
	defer it.Stop()
	for read := 0; read < total; read++ {
		m, err := it.Next()
		if err != nil {
			fatalf(t, "read %d of %d output messages: %v", read, total, err)
		}
		var v []any
		if err := json.Unmarshal(m.Data(), &v); err != nil || len(v) != 2 {
			fatalf(t, "output message %q is not [word, count]: %v", m.Data(), err)
		}
		got[fmt.Sprintf("%v\t%v", v[0], v[1])]++
	}
	return got, total
}

// compareOutput compares the (word, k) updates with the input's words.
// lost counts word occurrences the final counts miss (a word's largest
// update below its number of occurrences); missing and dup count updates
// (word, k), k up to the word's count, absent or there more than once.
// Under exactly-once every update is there once. Under at-least-once a
// rollback may replay a word's occurrences in another order, so one count
// can be published twice and another never, while the final count is
// right: only lost counts there.
func compareOutput(oracle map[string]int64, got map[string]int) (lost, missing, dup int) {
	final := map[string]int64{}
	for u := range got {
		w, k, _ := strings.Cut(u, "\t")
		var n int64
		fmt.Sscan(k, &n)
		final[w] = max(final[w], n)
	}
	for w, n := range oracle {
		lost += int(max(0, n-final[w]))
		for k := int64(1); k <= n; k++ {
			switch c := got[fmt.Sprintf("%s\t%d", w, k)]; {
			case c == 0:
				missing++
			case c > 1:
				dup += c - 1
			}
		}
	}
	return lost, missing, dup
}

// recovered records how long after t0 (a fault, or its healing) records
// flow again at half the rate before, in a plan after the given one (see
// clusterStatus.plan) that runs every task (-1: not within two minutes, or the run ended).
func (d *dockerSuite) recovered(c *dockerCase, t0 time.Time, after uint64) {
	d.t.Helper()
	st := d.c.status()
	plan, last, lastAt := st.plan(), st.records(), time.Now()
	for time.Since(t0) < 2*time.Minute {
		time.Sleep(250 * time.Millisecond)
		s := d.c.status()
		if s.Topology.State == "finished" {
			break
		}
		now := time.Now()
		if s.plan() == plan && s.plan() > after && s.running() {
			if r := float64(s.records()-last) / now.Sub(lastAt).Seconds(); r >= c.before/2 {
				c.recoveries = append(c.recoveries, now.Sub(t0))
				return
			}
		}
		plan, last, lastAt = s.plan(), s.records(), now
	}
	c.recoveries = append(c.recoveries, -1)
}

// generation is the current plan (a generation, and the moves within
// it), before a fault that must replace it.
func (d *dockerSuite) generation() uint64 { return d.c.status().plan() }

func (d *dockerSuite) randomWorker(rng *rand.Rand, not ...string) string {
	for {
		w := []string{"w1", "w2", "w3"}[rng.IntN(3)]
		if !strings.Contains(strings.Join(not, " "), w) {
			return w
		}
	}
}

// killAndRestart SIGKILLs a random worker three times; each time the
// others take over, then it is started again and rejoins.
func killAndRestart(t *testing.T, d *dockerSuite, c *dockerCase) {
	rng := rand.New(rand.NewPCG(uint64(c.n), 1))
	for range 3 {
		w := d.randomWorker(rng)
		id := d.container(w)
		g := d.generation()
		t0 := time.Now()
		d.docker("kill", "-s", "KILL", id)
		c.faults++
		d.recovered(c, t0, g)
		g = d.generation()
		t1 := time.Now()
		d.docker("start", id)
		d.recovered(c, t1, g)
		t.Logf("SIGKILL %s; started again", w)
	}
}

// pausePastLease pauses a worker until the others have taken its tasks
// over (past its lease), then unpauses it: its frames of the old
// generation are fenced, and it rejoins.
func pausePastLease(t *testing.T, d *dockerSuite, c *dockerCase) {
	w := d.randomWorker(rand.New(rand.NewPCG(uint64(c.n), 2)))
	id := d.container(w)
	g := d.generation()
	t0 := time.Now()
	d.docker("pause", id)
	c.faults++
	d.recovered(c, t0, g)
	time.Sleep(time.Second)
	g = d.generation()
	t1 := time.Now()
	d.docker("unpause", id)
	d.recovered(c, t1, g)
	t.Logf("paused %s for %v", w, time.Since(t0).Round(time.Second))
}

// partition cuts a worker off the compose network until the others have
// taken its tasks over, then connects it again.
func partition(t *testing.T, d *dockerSuite, c *dockerCase) {
	w := d.randomWorker(rand.New(rand.NewPCG(uint64(c.n), 3)))
	id := d.container(w)
	network := d.project + "_default"
	g := d.generation()
	t0 := time.Now()
	d.docker("network", "disconnect", network, id)
	c.faults++
	d.recovered(c, t0, g)
	time.Sleep(time.Second)
	g = d.generation()
	t1 := time.Now()
	d.docker("network", "connect", network, id)
	d.recovered(c, t1, g)
	t.Logf("cut %s off the network for %v", w, time.Since(t0).Round(time.Second))
}

// restartNATSNode restarts one NATS server of the three (not nats1, whose
// port the test uses).
func restartNATSNode(t *testing.T, d *dockerSuite, c *dockerCase) {
	node := []string{"nats2", "nats3"}[c.n%2]
	t0 := time.Now()
	d.docker("restart", "-t", "1", d.container(node))
	c.faults++
	d.recovered(c, t0, 0) // the workers may keep their generation
	t.Logf("restarted %s", node)
}

// killTwo SIGKILLs two of the three workers at once; the third runs every
// task; then both are started again.
func killTwo(t *testing.T, d *dockerSuite, c *dockerCase) {
	rng := rand.New(rand.NewPCG(uint64(c.n), 4))
	a := d.randomWorker(rng)
	b := d.randomWorker(rng, a)
	ia, ib := d.container(a), d.container(b)
	g := d.generation()
	t0 := time.Now()
	d.docker("kill", "-s", "KILL", ia, ib)
	c.faults += 2
	d.recovered(c, t0, g)
	g = d.generation()
	t1 := time.Now()
	d.docker("start", ia, ib)
	d.recovered(c, t1, g)
	t.Logf("SIGKILL %s and %s together; started again", a, b)
}
