//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
)

// TestExactlyOnceResumesAfterKill stops an exactly-once word count midway,
// once with SIGINT (it takes a final checkpoint) and once with SIGKILL (it
// stops dead), and resumes it from its checkpoint directory: the final
// counts equal the generator's and every count update is in the sink
// exactly once, none twice, none skipped.
func TestExactlyOnceResumesAfterKill(t *testing.T) {
	const lines = 60000
	oracle, err := wordcount.RandomText(io.Discard, lines, 1) // what --random-lines writes
	if err != nil {
		t.Fatal(err)
	}
	// --random-lines writes its input to TMPDIR and removes it at exit,
	// which a SIGKILLed run never reaches: a test directory takes it.
	t.Setenv("TMPDIR", t.TempDir())
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			ckpt, updates, out := filepath.Join(dir, "ckpt"), filepath.Join(dir, "updates"), filepath.Join(dir, "counts.tsv")
			if err := os.Mkdir(updates, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "wordcount", "--guarantee", "exactly-once", "--random-lines", fmt.Sprint(lines), "--rate", "15000",
				"--checkpoint-dir", ckpt, "--checkpoint-every", "200ms", "--updates", updates, "--output", out, "--quiet"}
			stopAfter(t, 2*time.Second, sig, args...)
			checkpointsListed(t, ckpt)
			stdout, stderr, err := ackflow(t, 3*time.Minute, append(args, "--resume")...)
			if err != nil {
				t.Fatalf("the resumed run failed: %v\n%s\n%s", err, stdout, stderr)
			}
			if !strings.Contains(stdout, "resumed from epoch") || !strings.Contains(stdout, "0 occurrences missing, 0 counted more than once") {
				t.Fatalf("the resumed run did not resume or did not count exactly:\n%s", stdout)
			}
			got := readCounts(t, out)
			for w, n := range oracle {
				if got[w] != n {
					t.Fatalf("%q: counted %d, occurs %d times", w, got[w], n)
				}
			}
			upd, err := sinks.Lines(updates, "updates")
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, l := range upd {
				seen[strings.TrimSuffix(l, "\n")]++
			}
			var total int64
			for w, n := range oracle {
				total += n
				for k := int64(1); k <= n; k++ {
					if c := seen[fmt.Sprintf("%s\t%d", w, k)]; c != 1 {
						t.Fatalf("update %s=%d is in the sink %d times, want once", w, k, c)
					}
				}
			}
			if int64(len(upd)) != total {
				t.Fatalf("%d update lines, want %d", len(upd), total)
			}
		})
	}
}

// checkpointsListed checks that ackflow checkpoints shows the stopped
// run's epochs and the spout's position.
func checkpointsListed(t *testing.T, dir string) {
	t.Helper()
	list, stderr, err := ackflow(t, time.Minute, "checkpoints", "list", "--dir", dir)
	if err != nil || !strings.Contains(list, "wordcount:") || !strings.Contains(list, "complete") || !strings.Contains(list, "lines[0]=") {
		t.Fatalf("checkpoints list: %v\n%s\n%s", err, list, stderr)
	}
	inspect, stderr, err := ackflow(t, time.Minute, "checkpoints", "inspect", "--dir", dir, "--topology", "wordcount")
	if err != nil || !strings.Contains(inspect, "count[1]") || !strings.Contains(inspect, "fingerprint") {
		t.Fatalf("checkpoints inspect: %v\n%s\n%s", err, inspect, stderr)
	}
}

// stopAfter runs the binary and sends it sig after d; the run must not
// have finished by then.
func stopAfter(t *testing.T, d time.Duration, sig syscall.Signal, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the run finished before it was stopped:\n%s", out.String())
	}
	if sig == syscall.SIGINT && !strings.Contains(out.String(), "checkpoints:") {
		t.Fatalf("the interrupted run reports no checkpoint:\n%s\n%s", out.String(), errb.String())
	}
}

// TestRunPageviews runs the second bundled job, exactly-once with a crash,
// and lets the binary check its window counts against the generator's.
func TestRunPageviews(t *testing.T) {
	stdout, stderr, err := ackflow(t, 3*time.Minute, "run", "pageviews", "--guarantee", "exactly-once", "--workers", "3",
		"--events", "30000", "--rate", "15000", "--chaos", "drop=0.02,crash-every=1200ms,seed=4")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"windows against the generator's: 0 missing, 0 wrong, 0 delivered twice, 0 late events", "worker crashes"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("the output does not say %q:\n%s", want, stdout)
		}
	}
}
