package bench

import (
	"context"
	"testing"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
)

// BenchmarkWordCount runs the suite's word count (8 copies of the bundled
// text, 2 workers) once per iteration in each mode, reporting records/s:
// the whole runtime's cost per record, for a CPU profile
// (go test -run X -bench WordCount -cpuprofile cpu.out ./bench/).
func BenchmarkWordCount(b *testing.B) {
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	s := &suite{dir: b.TempDir(), rep: &Report{}, url: srv.URL()}
	if err := s.prepareInput(8); err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name    string
		g       workers.Guarantee
		noDedup bool
	}{{"at-most-once", workers.AtMostOnce, true}, {"at-least-once", workers.AtLeastOnce, true}, {"at-least-once-dedup", workers.AtLeastOnce, false}} {
		b.Run(m.name, func(b *testing.B) {
			var records, secs float64
			for b.Loop() {
				sum, lostWords, err := s.wordCount(context.Background(), wordcount.Config{}, func(c *workers.Config) { c.Guarantee, c.NoDedup = m.g, m.noDedup })
				if err != nil {
					b.Fatal(err)
				}
				if lostWords > 0 {
					b.Fatalf("lost %d words", lostWords)
				}
				records += float64(sum.Records)
				secs += sum.Duration.Seconds()
			}
			b.ReportMetric(records/secs, "records/s")
		})
	}
}
