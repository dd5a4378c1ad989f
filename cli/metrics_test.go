package cli

import (
	"bytes"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMetricsOnAnAddressInUseFailsAtStart: run and worker refuse to start
// when --metrics names an address another process holds, and say so.
func TestMetricsOnAnAddressInUseFailsAtStart(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	for _, args := range [][]string{
		{"run", "wordcount", "--quiet", "--metrics", addr},
		// Nothing listens for NATS there: the metrics address is checked first.
		{"worker", "--nats", "nats://127.0.0.1:1", "--metrics", addr},
	} {
		root := NewRoot(Bundled())
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.Execute()
		if err == nil {
			t.Fatalf("%q started with --metrics on an address in use", args)
		}
		for _, want := range []string{"--metrics", addr, "in use", "free port"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: the error does not say %q: %v", args, want, err)
			}
		}
	}
}

// TestRunServesMetricsUntilItEnds: run says where its metrics are, and
// stops serving them when it ends.
func TestRunServesMetricsUntilItEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, errOut, err := runRoot("run", "wordcount", "--random-lines", "300", "--quiet", "--log-level", "error", "--metrics", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	m := regexp.MustCompile(`serving metrics on (http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("run does not say where it serves its metrics: %q", errOut)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get(m[1]); err == nil {
		resp.Body.Close()
		t.Fatalf("%s still answers after the run ended", m[1])
	}
}

// TestRunSurvivesNodeCrashes: run crashes a node of its in-process
// cluster as the chaos says, and still counts every word of the
// generator exactly.
func TestRunSurvivesNodeCrashes(t *testing.T) {
	defer goleak.VerifyNone(t)
	out, errOut, err := runRoot("run", "wordcount", "--workers", "3", "--random-lines", "20000", "--rate", "10000",
		"--chaos", "crash-every=500ms,seed=4", "--quiet", "--log-level", "error")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, want := range []string{"0 occurrences missing, 0 counted more than once", "3 workers"} {
		if !strings.Contains(out, want) {
			t.Fatalf("run does not say %q:\n%s", want, out)
		}
	}
	if m := regexp.MustCompile(`(\d+) worker crashes`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Fatalf("no node crashed; the test proves nothing:\n%s", out)
	}
}

// runRoot runs the ackflow command line with args and returns what it
// printed on stdout and stderr.
func runRoot(args ...string) (stdout, stderr string, err error) {
	root := NewRoot(Bundled())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}
