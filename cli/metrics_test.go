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
	root := NewRoot(Bundled())
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"run", "wordcount", "--random-lines", "300", "--quiet", "--log-level", "error", "--metrics", "127.0.0.1:0"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	m := regexp.MustCompile(`serving metrics on (http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(errOut.String())
	if m == nil {
		t.Fatalf("run does not say where it serves its metrics: %q", errOut.String())
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get(m[1]); err == nil {
		resp.Body.Close()
		t.Fatalf("%s still answers after the run ended", m[1])
	}
}
