//go:build e2e

package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
)

// TestMisconfigurationsSayWhatToDo runs the binary against each
// misconfiguration the hardening issue lists and checks that it exits 1
// with a message that says what happened and what to do. Version skew
// between workers is a run-time refusal, not an exit:
// workers.TestWorkerWithAnotherBuildGetsNoTasks covers it. A checkpoint
// store that fails during a run abandons checkpoints with a warning and
// the run goes on: workers.TestCheckpointStoreFailures covers that.
func TestMisconfigurationsSayWhatToDo(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{User: "ackflow", Password: "right"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().String()
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string // every one must be in stderr
	}{
		{"NATS unreachable", []string{"run", "wordcount", "--nats", "nats://127.0.0.1:1", "--quiet"},
			[]string{"no NATS server answers at nats://127.0.0.1:1", "check that the servers run"}},
		{"NATS unreachable for a worker", []string{"worker", "--nats", "nats://127.0.0.1:1"},
			[]string{"no NATS server answers", "ackflow nats starts one"}},
		{"bad credentials", []string{"status", "wordcount", "--nats", srv.URL(), "--user", "ackflow", "--password", "wrong"},
			[]string{"refused this client's credentials", "check --user and --password"}},
		{"bad credentials for a worker", []string{"worker", "--nats", srv.URL(), "--user", "ackflow", "--password", "wrong"},
			[]string{"refused this client's credentials"}},
		{"unknown topology", []string{"submit", "nosuch", "--nats", srv.URL(), "--user", "ackflow", "--password", "right"},
			[]string{"no topology nosuch", "it has wordcount"}},
		{"unknown job", []string{"run", "nosuch"}, []string{"unknown job"}},
		{"checkpoint store unavailable", []string{"run", "wordcount", "--guarantee", "exactly-once", "--checkpoint-dir", filepath.Join(notADir, "ckpt"), "--quiet"},
			[]string{"cannot create the checkpoint directory", "give --checkpoint-dir a directory"}},
		{"resume without checkpoints", []string{"run", "wordcount", "--guarantee", "exactly-once", "--checkpoint-dir", filepath.Join(dir, "empty"), "--resume", "--quiet"},
			[]string{"checkpoint"}},
		{"metrics port in use", []string{"run", "wordcount", "--metrics", busy, "--quiet"},
			[]string{"in use by another process", "give a free port"}},
		{"status page port in use", []string{"run", "wordcount", "--ui", busy, "--quiet"},
			[]string{"in use by another process"}},
		{"worker metrics port in use", []string{"worker", "--nats", srv.URL(), "--user", "ackflow", "--password", "right", "--metrics", busy},
			[]string{"in use by another process"}},
	}
	if _, err := os.Stat("/dev/full"); err == nil {
		cases = append(cases, struct {
			name string
			args []string
			want []string
		}{"full disk for the counts file", []string{"run", "wordcount", "--output", "/dev/full", "--quiet"},
			[]string{"could not be written to /dev/full", "no space left on device", "the disk is full: free space"}})
	} else {
		t.Log("no /dev/full here: the full-disk case is left out")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, err := ackflow(t, 2*time.Minute, c.args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("ackflow %s: %v, want exit status 1; stderr:\n%s", strings.Join(c.args, " "), err, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("ackflow %s: stderr does not say %q:\n%s", strings.Join(c.args, " "), w, stderr)
				}
			}
		})
	}
}
