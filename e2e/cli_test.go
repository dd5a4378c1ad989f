//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var binary string

// TestMain builds the binary the tests run, or takes the one that
// ACKFLOW_E2E_BINARY names: e2e/run builds it once for the two test
// processes it starts.
func TestMain(m *testing.M) {
	if binary = os.Getenv("ACKFLOW_E2E_BINARY"); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ackflow-e2e-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "ackflow")
	build := exec.Command("go", "build", "-o", binary, "../cmd/ackflow")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building ackflow:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ackflow runs the binary with a deadline and returns stdout and stderr.
func ackflow(t *testing.T, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	return runProgram(t, binary, timeout, args...)
}

// runProgram runs prog, a build of cli.Main, as ackflow does.
func runProgram(t *testing.T, prog string, timeout time.Duration, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// writeText writes about size bytes of random text and returns the word
// counts computed here, independently of ackflow: words are maximal runs of
// letters and digits, lowercased.
func writeText(t *testing.T, path string, size int, seed uint64) map[string]int64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	vocab := make([]string, 20000)
	for i := range vocab {
		var b strings.Builder
		for j := 0; j < 1+rng.IntN(10); j++ {
			b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)])
		}
		vocab[i] = b.String()
	}
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(len(vocab)-1))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	written := 0
	for written < size {
		n := rng.IntN(20)
		for j := 0; j < n; j++ {
			word := vocab[zipf.Uint64()]
			sep := []string{" ", " ", ", ", "; ", " (", ") ", "\t"}[rng.IntN(7)]
			if rng.IntN(20) == 0 {
				word = strings.ToUpper(word)
			}
			written += len(word) + len(sep)
			w.WriteString(word)
			w.WriteString(sep)
		}
		if rng.IntN(50) == 0 {
			w.WriteString("\r") // Windows line ending now and then
			written++
		}
		w.WriteByte('\n')
		written++
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The oracle reads the file back and splits it with its own code.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	oracle := map[string]int64{}
	start := -1
	for i, r := range string(data) + " " {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			oracle[strings.ToLower(string(data[start:i]))]++
			start = -1
		}
	}
	return oracle
}

func readCounts(t *testing.T, path string) map[string]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w, c, ok := strings.Cut(sc.Text(), "\t")
		n, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil {
			t.Fatalf("bad output line %q", sc.Text())
		}
		m[w] = n
	}
	return m
}

func TestWordCount50MBExact(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.txt"), filepath.Join(dir, "counts.tsv")
	oracle := writeText(t, in, 50<<20, 1)
	stdout, stderr, err := ackflow(t, 10*time.Minute, "run", "wordcount", "--input", in, "--output", out, "--workers", "3")
	if err != nil {
		t.Fatalf("ackflow run failed: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	t.Log(stdout)
	got := readCounts(t, out)
	if len(got) != len(oracle) {
		t.Errorf("%d distinct words in the output, %d in the input", len(got), len(oracle))
	}
	bad := 0
	for w, n := range oracle {
		if got[w] != n {
			if bad++; bad < 10 {
				t.Errorf("%q: got %d, want %d", w, got[w], n)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d words differ", bad)
	}
	m := regexp.MustCompile(`\((\d+) records crossed NATS`).FindStringSubmatch(stdout)
	if m == nil || m[1] == "0" {
		t.Fatalf("the summary does not show records crossing NATS:\n%s", stdout)
	}
}

func TestRunRefusesWhatDoesNotExist(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "wordcount", "--guarantee", "twice"}, "unknown guarantee"},
		{[]string{"run", "nosuchjob"}, "unknown job"},
		{[]string{"run", "wordcount", "--input", "/nonexistent/file"}, "no such file"},
		{[]string{"run", "wordcount", "--parallelism", "split=x"}, "component=N"},
		{[]string{"run", "wordcount", "--parallelism", "nope=2"}, "not a component"},
		{[]string{"run", "wordcount", "--chaos", "drop=2"}, "probability"},
		{[]string{"run", "wordcount", "--workers", "0"}, "workers"},
		{[]string{"run", "wordcount", "--rate", "nan"}, "--rate"},
		{[]string{"run", "wordcount", "--resume"}, "--resume needs the --checkpoint-dir"},
		{[]string{"run", "wordcount", "--guarantee", "at-most-once", "--checkpoint-every", "1s"}, "checkpoints need at-least-once"},
		{[]string{"run", "pageviews", "--events", "0"}, "--events 0"},
		{[]string{"run", "wordcount", "--max-attempts", "-1"}, "max attempts"},
		{[]string{"run", "wordcount", "--random-lines", "10", "--input", "x.txt"}, "not both"},
		{[]string{"run", "wordcount", "--dead-letters", "/nonexistent/dir/dlq.jsonl", "--chaos", "fail=1", "--max-attempts", "1", "--random-lines", "5"}, "/nonexistent/dir does not exist"},
	}
	for _, c := range cases {
		_, stderr, err := ackflow(t, time.Minute, c.args...)
		if err == nil {
			t.Errorf("%v: succeeded, want an error", c.args)
			continue
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q does not mention %q", c.args, stderr, c.want)
		}
	}
}

func TestRunBundledAtLeastOnceWithChaos(t *testing.T) {
	stdout, stderr, err := ackflow(t, 3*time.Minute, "run", "wordcount", "--guarantee", "at-least-once", "--workers", "3",
		"--chaos", "drop=0.05,dup=0.02,reorder=0.05,seed=3", "--message-timeout", "1s", "--batch", "64")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "1.    the") || !strings.Contains(stdout, "chaos:") {
		t.Fatalf("unexpected output:\n%s", stdout)
	}
}

// TestRunLossyRandomTextIsExact is the run that took four minutes before
// lost frames were resent: 20,000 random lines, 3 workers, 5% of frames
// lost, the default 30 s message timeout. The binary checks its counts
// against the generator's and fails if they differ.
func TestRunLossyRandomTextIsExact(t *testing.T) {
	stdout, stderr, err := ackflow(t, 3*time.Minute, "run", "wordcount", "--random-lines", "20000", "--workers", "3",
		"--chaos", "drop=0.05,dup=0.01,seed=5")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"0 occurrences missing, 0 counted more than once", "frames resent"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("the output does not say %q:\n%s", want, stdout)
		}
	}
	t.Log(stdout)
}

// TestRunDeadLettersToAFile fails every line twice: each goes to the
// dead-letter file, the summary says so, and the run ends normally.
func TestRunDeadLettersToAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	stdout, stderr, err := ackflow(t, 3*time.Minute, "run", "wordcount", "--random-lines", "50", "--chaos", "fail=1,seed=1",
		"--max-attempts", "2", "--dead-letters", path)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n != 50 {
		t.Fatalf("%d dead letters in %s, want 50", n, path)
	}
	if !strings.Contains(stdout, "50 records failed too often and went to the dead letters (in "+path) || !strings.Contains(stdout, "chaos: injected failure") {
		t.Fatalf("the summary does not report the dead letters:\n%s", stdout)
	}
}

// TestRunRateInf: an infinite rate means unpaced, not a hang.
func TestRunRateInf(t *testing.T) {
	stdout, stderr, err := ackflow(t, time.Minute, "run", "wordcount", "--rate", "inf")
	if err != nil || !strings.Contains(stdout, "1.    the") {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
}

// TestRunInterruptedPrintsSummary: Ctrl-C stops a run and still prints
// what it did.
func TestRunInterruptedPrintsSummary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "wordcount", "--random-lines", "100000", "--rate", "10000")
	// The random input goes to TMPDIR; a test directory keeps anything
	// the interrupted run might leave out of the machine's /tmp.
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	defer func() {
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Logf("the interrupted run left %d files in its TMPDIR, e.g. %s", len(left), left[0].Name())
		}
	}()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("exit %v (deadline %v)", err, ctx.Err())
	}
	for _, want := range []string{"interrupted", "top words:", "source records", "component"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("stdout does not say %q:\n%s\nstderr:\n%s", want, out.String(), errb.String())
		}
	}
	if !strings.Contains(errb.String(), "interrupted before the input was processed") {
		t.Fatalf("stderr: %s", errb.String())
	}
}

// TestBenchQuick is the CI smoke test of the benchmark suite: it fails only
// if a run errors or loses records, never on timing.
func TestBenchQuick(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.json")
	stdout, stderr, err := ackflow(t, 5*time.Minute, "bench", "--quick", "--json", out)
	if err != nil {
		t.Fatalf("ackflow bench --quick failed: %v\n%s\n%s", err, stdout, stderr)
	}
	t.Log(stdout)
	var rep struct {
		Rows []struct {
			Name          string  `json:"name"`
			RecordsPerSec float64 `json:"records_per_sec"`
			Lost          int64   `json:"lost"`
		} `json:"rows"`
		Recovery struct {
			Lost int64 `json:"lost"`
		} `json:"recovery"`
		Loss struct {
			Lost       int64 `json:"lost"`
			Duplicated int64 `json:"duplicated"`
			Resent     int64 `json:"frames_resent"`
		} `json:"loss_recovery"`
		Breakdown struct {
			Parts []struct {
				Name  string  `json:"name"`
				Share float64 `json:"share"`
			} `json:"parts"`
		} `json:"cpu_breakdown"`
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range rep.Rows {
		names[r.Name] = true
		if r.RecordsPerSec <= 0 || r.Lost != 0 {
			t.Errorf("row %s: %.0f records/s, %d lost", r.Name, r.RecordsPerSec, r.Lost)
		}
	}
	for _, n := range []string{"raw-nats", "jetstream-chain", "at-most-once", "at-least-once", "at-least-once-dedup"} {
		if !names[n] {
			t.Errorf("row %s missing", n)
		}
	}
	if rep.Recovery.Lost != 0 {
		t.Errorf("recovery lost %d records", rep.Recovery.Lost)
	}
	if l := rep.Loss; l.Lost != 0 || l.Duplicated != 0 || l.Resent == 0 {
		t.Errorf("lossy run: %d lost, %d duplicated, %d frames resent", l.Lost, l.Duplicated, l.Resent)
	}
	parts := map[string]float64{}
	for _, p := range rep.Breakdown.Parts {
		parts[p.Name] = p.Share
	}
	for _, p := range []string{"dedup (Bloom filter, exact ring)", "user code (split, count)", "codec (frames)"} {
		if parts[p] <= 0 {
			t.Errorf("the CPU breakdown has no time for %q: %v", p, parts)
		}
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "bench.svg")); err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Errorf("no SVG chart next to the JSON: %v", err)
	}
}

// TestNATSCommand starts `ackflow nats`, uses it, and stops it with SIGTERM.
func TestNATSCommand(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "nats", "--addr", addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "listening on nats://"+addr) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("unexpected first line %q (%v)", line, err)
	}
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream is not enabled: %v", err)
	}
	nc.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ackflow nats did not exit cleanly on SIGTERM: %v", err)
	}
}
