package bench

import (
	"context"
	"testing"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
)

// TestMetricsCost measures the cost of metrics on a small input: the runs
// with a registry are scraped and show the runtime's figures, and the
// ratio is reported. As in the suite, an at-least-once run comes first and
// sizes the metrics runs to about a second each (the quick profile's), so
// that they last several scrapes however fast the host is: with a fixed
// input of 4 copies a fast host finished every run before the first scrape
// (100 ms) and the test failed.
func TestMetricsCost(t *testing.T) {
	noLeaks(t)
	srv := startNATS(t, embednats.Config{NoJetStream: true})
	dir := t.TempDir()
	s := &suite{cfg: SuiteConfig{Quick: true}, url: srv.URL(), opts: []nats.Option{srv.InProcess()}, dir: dir, rep: &Report{}}
	copies := 4
	if raceEnabled {
		copies = 1
	}
	if err := s.prepareInput(copies); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sum, lostWords, err := s.wordCount(ctx, wordcount.Config{}, func(c *workers.Config) { c.Guarantee, c.NoDedup = workers.AtLeastOnce, true })
	if err != nil || lostWords > 0 {
		t.Fatalf("the at-least-once run that sizes the metrics runs: %v, %d words lost", err, lostWords)
	}
	s.rep.Rows = append(s.rep.Rows, Row{Name: "at-least-once", RecordsPerSec: sum.RecordsPerSec, Records: sum.Records})
	if err := s.metricsCost(ctx); err != nil {
		t.Fatal(err)
	}
	m := s.rep.Metrics
	t.Logf("%+v", m)
	if m.Scrapes == 0 || m.PageBytes == 0 || m.OnRecordsPerSec <= 0 || m.OffRecordsPerSec <= 0 || m.Ratio != m.OnRecordsPerSec/m.OffRecordsPerSec {
		t.Fatalf("the metrics cost is not measured: %+v", m)
	}
}
