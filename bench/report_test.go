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

// TestP99GoalSaysWhenTheRunsWereSaturated: the table gives the processors
// each latency run kept busy, and the p99 goal says that the host was
// saturated, and what to do, when the runs' median reached saturatedShare
// of the machine's processors, and says nothing of it below.
func TestP99GoalSaysWhenTheRunsWereSaturated(t *testing.T) {
	for _, c := range []struct {
		cores     []float64
		saturated bool
	}{{[]float64{1.4, 1.5, 1.45}, false}, {[]float64{1.95, 1.7, 1.79}, false}, {[]float64{1.95, 1.7, 1.9}, true}, {nil, false}} {
		r := saneReport()
		r.Rows = append(r.Rows, Row{Name: "at-most-once", RecordsPerSec: 3e6}, Row{Name: "raw-nats", RecordsPerSec: 1e6}, Row{Name: "jetstream-chain", RecordsPerSec: 1e5})
		r.Latency.CoresRuns = c.cores
		r.Goals = nil
		(&suite{rep: r}).goals()
		var b strings.Builder
		r.WriteTable(&b)
		out := b.String()
		if got := strings.Contains(out, "so this p99 is a saturated host's; run `ackflow bench` again"); got != c.saturated {
			t.Errorf("runs busy %v of 2 processors: the p99 goal says saturated: %v, want %v\n%s", c.cores, got, c.saturated, out)
		}
		if c.saturated && !strings.Contains(out, "kept 1.90 of the 2 processors busy") {
			t.Errorf("the note does not give the runs' median:\n%s", out)
		}
		if busy := strings.Contains(out, "processors busy in the latency runs"); busy != (c.cores != nil) {
			t.Errorf("runs busy %v: the table gives them: %v\n%s", c.cores, busy, out)
		}
		if c.cores != nil && !strings.Contains(out, fixed2(c.cores)+" of 2") {
			t.Errorf("the table does not list every run's processors (%s):\n%s", fixed2(c.cores), out)
		}
	}
}
