package cli

import (
	"strings"
	"testing"

	"github.com/ackflow/ackflow/workers"
)

// TestSummarySaysWhatWasLost: the summary's lines for records dropped on
// the way, in flight and dropped by stopping tasks say whether their
// trees replayed (never, at most once), and each closes the parenthesis
// it opens.
func TestSummarySaysWhatWasLost(t *testing.T) {
	for _, g := range []workers.Guarantee{workers.AtLeastOnce, workers.AtMostOnce} {
		var b strings.Builder
		printSummary(&b, &workers.Summary{Guarantee: g, FencedRecords: 2, LostFrames: 1, Unaccounted: 7, Discarded: 3})
		out := b.String()
		for _, c := range []struct{ line, alo string }{
			{"dropped: 0 bad frames, 2 fenced records", "their trees were failed and replayed"},
			{"lost frames: 0 NACKs sent", "their trees timed out"},
			{"7 records were sent but never processed", "their trees were replayed"},
			{"3 records were dropped unprocessed", "their trees were replayed"},
		} {
			want := c.alo
			if g == workers.AtMostOnce {
				want = "at-most-once does not replay them"
			}
			i := strings.Index(out, c.line)
			if i < 0 {
				t.Fatalf("%v: no line %q in\n%s", g, c.line, out)
			}
			l := out[i : i+strings.Index(out[i:], "\n")]
			if !strings.Contains(l, want) || strings.Count(l, "(") != strings.Count(l, ")") {
				t.Errorf("%v: %q should say %q and balance its parentheses", g, l, want)
			}
		}
	}
}

// TestRunRefusesSettingsThatCannotWork: a runtime setting given as 0 is
// refused with what it must be, not taken as "the default".
func TestRunRefusesSettingsThatCannotWork(t *testing.T) {
	for flag, want := range map[string]string{
		"--batch":           "batch size 0 must be at least 1",
		"--linger":          "linger 0s must be positive",
		"--max-pending":     "max spout pending 0 must be at least 1",
		"--ackers":          "0 ackers",
		"--message-timeout": "message timeout 0s is too short",
	} {
		_, _, err := runRoot("run", "wordcount", "--quiet", "--random-lines", "10", flag, "0")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run %s 0: error %v, want one saying %q", flag, err, want)
		}
	}
}
