package cli

import (
	"strings"
	"testing"

	"github.com/ackflow/ackflow/workers"
)

// TestSummarySaysWhatWasLost: the summary's lines for records in flight
// and records stopping tasks dropped say whether their trees replayed,
// and each closes the parenthesis it opens.
func TestSummarySaysWhatWasLost(t *testing.T) {
	for _, g := range []workers.Guarantee{workers.AtLeastOnce, workers.AtMostOnce} {
		var b strings.Builder
		printSummary(&b, &workers.Summary{Guarantee: g, Unaccounted: 7, Discarded: 3})
		out := b.String()
		want := "their trees were replayed"
		if g == workers.AtMostOnce {
			want = "at-most-once does not replay them"
		}
		for _, line := range []string{"7 records were sent but never processed", "3 records were dropped unprocessed"} {
			i := strings.Index(out, line)
			if i < 0 {
				t.Fatalf("%v: no line %q in\n%s", g, line, out)
			}
			l := out[i : i+strings.Index(out[i:], "\n")]
			if !strings.Contains(l, want) || strings.Count(l, "(") != strings.Count(l, ")") {
				t.Errorf("%v: %q should say %q and balance its parentheses", g, l, want)
			}
		}
	}
}
