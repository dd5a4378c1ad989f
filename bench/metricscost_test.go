package bench

import (
	"context"
	"testing"

	"github.com/ackflow/ackflow/embednats"
	"github.com/nats-io/nats.go"
)

// TestMetricsCost measures the cost of metrics on a small input: the runs
// with a registry are scraped and show the runtime's figures, and the
// ratio is reported.
func TestMetricsCost(t *testing.T) {
	noLeaks(t)
	srv := startNATS(t, embednats.Config{NoJetStream: true})
	dir := t.TempDir()
	s := &suite{url: srv.URL(), opts: []nats.Option{srv.InProcess()}, dir: dir, rep: &Report{}}
	// Enough copies of the text for each run to last a few scrapes.
	copies := 4
	if raceEnabled {
		copies = 1
	}
	if err := s.prepareInput(copies); err != nil {
		t.Fatal(err)
	}
	if err := s.metricsCost(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := s.rep.Metrics
	t.Logf("%+v", m)
	if m.Scrapes == 0 || m.PageBytes == 0 || m.OnRecordsPerSec <= 0 || m.OffRecordsPerSec <= 0 || m.Ratio != m.OnRecordsPerSec/m.OffRecordsPerSec {
		t.Fatalf("the metrics cost is not measured: %+v", m)
	}
}
