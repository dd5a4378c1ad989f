package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/embednats/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestLogLevelCommand sets and clears a running topology's log level in its
// submission, and refuses a level it does not know and a topology that is
// not running.
func TestLogLevelCommand(t *testing.T) {
	_, url, reg := submittedWordCount(t)
	ctx := context.Background()
	run := func(args ...string) (string, error) { return runAgainst(url, args...) }
	level := func() string {
		spec, _, err := reg.Get(ctx, "wordcount")
		if err != nil {
			t.Fatal(err)
		}
		return spec.LogLevel
	}
	if out, err := run("loglevel", "wordcount", "DEBUG"); err != nil || level() != "debug" || !strings.Contains(out, "logs at debug") {
		t.Fatalf("loglevel debug: %v, %q; the submission says %q", err, out, level())
	}
	if _, err := run("loglevel", "wordcount", "verbose"); err == nil || !strings.Contains(err.Error(), "use debug, info, warn or error") || level() != "debug" {
		t.Fatalf("loglevel verbose: %v; the submission says %q", err, level())
	}
	if out, err := run("loglevel", "wordcount", "default"); err != nil || level() != "" || !strings.Contains(out, "own --log-level") {
		t.Fatalf("loglevel default: %v, %q; the submission says %q", err, out, level())
	}
	if _, err := run("loglevel", "nosuch", "info"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("loglevel of a topology never submitted: %v", err)
	}
}

// submittedWordCount starts a JetStream server for t, checks for leaked
// goroutines when t ends, and submits wordcount (at-least-once) to its
// registry, as the cluster commands' tests need: it returns the server's
// JetStream, its URL and the registry.
func submittedWordCount(t *testing.T) (jetstream.JetStream, string, *cluster.KVRegistry) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	js, stop := natstest.JetStream(t)
	t.Cleanup(stop)
	reg, err := cluster.NewKVRegistry(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Submit(context.Background(), cluster.Spec{Name: "wordcount", Guarantee: "at-least-once"}); err != nil {
		t.Fatal(err)
	}
	return js, js.Conn().ConnectedUrl(), reg
}

// runAgainst runs the ackflow command line with args against the NATS
// server at url, and returns what it printed (out and err together).
func runAgainst(url string, args ...string) (string, error) {
	root := NewRoot(Bundled())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--nats", url))
	err := root.Execute()
	return out.String(), err
}
