package bench

import (
	"strings"
	"testing"
)

// TestReportSaysWhenTheHostIsNoisy: the table says the host was noisy
// when the stalls measured before the latency runs lost more than
// noisyHost of the time, and says nothing of it otherwise.
func TestReportSaysWhenTheHostIsNoisy(t *testing.T) {
	for _, c := range []struct {
		lost  float64
		noisy bool
	}{{0.004, false}, {noisyHost, false}, {0.155, true}} {
		r := saneReport()
		r.Latency.HostStalls.LostShare = c.lost
		var b strings.Builder
		r.WriteTable(&b)
		got := strings.Contains(b.String(), "the host was noisy")
		if got != c.noisy {
			t.Errorf("%.1f%% of the time lost: says the host was noisy: %v, want %v\n%s", 100*c.lost, got, c.noisy, b.String())
		}
		if c.noisy && !strings.Contains(b.String(), "lost 15.5% of its time") {
			t.Errorf("the noisy-host line does not give the share lost:\n%s", b.String())
		}
	}
}

// TestBloomGoalSaysItsBound: with the filter's false-positive rate
// measured, the Bloom goal's line carries the least bits a window of
// Bloom filters needs at that rate, and the table prints it under the
// goal and beside the memory figure.
func TestBloomGoalSaysItsBound(t *testing.T) {
	r := saneReport()
	r.Rows = append(r.Rows, Row{Name: "at-most-once", RecordsPerSec: 3e6}, Row{Name: "raw-nats", RecordsPerSec: 1e6}, Row{Name: "jetstream-chain", RecordsPerSec: 1e5})
	r.Goals = nil
	(&suite{rep: r}).goals()
	var note string
	for _, g := range r.Goals {
		if strings.HasPrefix(g.Name, "dedup Bloom bits") {
			note = g.Note
		}
	}
	if !strings.Contains(note, "false-positive rate of 0.00070") || !strings.Contains(note, "at least 21.9 bits") {
		t.Fatalf("the Bloom goal's note is %q", note)
	}
	var b strings.Builder
	r.WriteTable(&b)
	if out := b.String(); !strings.Contains(out, "      "+note) || !strings.Contains(out, "at a false-positive rate of 0.00070 (measured over 2000000 never-seen IDs") {
		t.Fatalf("the table does not show the bound:\n%s", out)
	}
}
