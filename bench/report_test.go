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
