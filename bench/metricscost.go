package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/workers"
)

// MetricsCost is what Prometheus metrics cost at-least-once word count:
// the same run without a metrics registry and with one that is scraped
// over HTTP every ScrapeEveryMs, alternated metricsRuns times, the best
// run of each counting: on a shared 2-core machine one run differs from
// the next by more than what metrics cost.
type MetricsCost struct {
	ScrapeEveryMs    float64 `json:"scrape_every_ms"`
	OffRecordsPerSec float64 `json:"off_records_per_sec"`
	OnRecordsPerSec  float64 `json:"on_records_per_sec"`
	Ratio            float64 `json:"ratio"`
	Scrapes          int     `json:"scrapes"`
	PageBytes        int     `json:"page_bytes"` // of the last scrape
}

// scrapeEvery is how often the metrics run is scraped: far more often
// than Prometheus's usual 15 s, to make the cost of a scrape visible.
const scrapeEvery = 100 * time.Millisecond

// metricsRuns is how many runs with metrics, and as many without, the
// measurement alternates.
const metricsRuns = 3

// metricsCost measures MetricsCost. Each run gets an input that lasts
// about a second (two in the full profile) at the at-least-once row's
// rate, so that it is scraped about ten times or more. Its figures are
// not a row of the throughput table: on a longer input than the other
// rows', they would not compare with them.
func (s *suite) metricsCost(ctx context.Context) error {
	mc := MetricsCost{ScrapeEveryMs: ms(scrapeEvery)}
	sized := *s
	if alo := s.rep.Row("at-least-once"); alo != nil && alo.RecordsPerSec > 0 {
		secs := 2.0
		if s.cfg.Quick {
			secs = 1
		}
		recordsPerCopy := float64(alo.Records) / float64(s.lines) * float64(linesPerCopy())
		sized.input = filepath.Join(s.dir, "metrics.txt")
		if err := sized.prepareInput(int(secs*alo.RecordsPerSec/recordsPerCopy) + 1); err != nil {
			return err
		}
	}
	for i := 0; i < 2*metricsRuns; i++ {
		withMetrics := i%2 == 1
		sum, scrapes, page, err := sized.metricsRun(ctx, withMetrics)
		if err != nil {
			return fmt.Errorf("bench: word count with metrics %v: %w", withMetrics, err)
		}
		if !withMetrics {
			mc.OffRecordsPerSec = max(mc.OffRecordsPerSec, sum.RecordsPerSec)
			continue
		}
		mc.Scrapes += scrapes
		mc.PageBytes = page
		mc.OnRecordsPerSec = max(mc.OnRecordsPerSec, sum.RecordsPerSec)
	}
	mc.Ratio = mc.OnRecordsPerSec / mc.OffRecordsPerSec
	s.rep.Metrics = mc
	s.logf("metrics: %.0f records/s scraped every %v, %.0f without (%.2f); %d scrapes, %d bytes a page",
		mc.OnRecordsPerSec, scrapeEvery, mc.OffRecordsPerSec, mc.Ratio, mc.Scrapes, mc.PageBytes)
	return nil
}

// metricsRun runs at-least-once word count (dedup off, as the
// at-least-once row), with a metrics server that a goroutine scrapes
// every scrapeEvery if withMetrics. It returns the scrapes and the bytes
// of the last page.
func (s *suite) metricsRun(ctx context.Context, withMetrics bool) (*workers.Summary, int, int, error) {
	var reg *metrics.Registry
	var scrapes, page int
	var scrapeErr error
	stop := func() {}
	if withMetrics {
		reg = metrics.NewRegistry()
		srv, err := metrics.Listen("127.0.0.1:0", reg)
		if err != nil {
			return nil, 0, 0, err
		}
		quit := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			scrapes, page, scrapeErr = scrapeUntil(quit, "http://"+srv.Addr()+"/metrics")
		}()
		stop = func() {
			close(quit)
			wg.Wait()
			srv.Close()
		}
	}
	sum, lostWords, err := s.wordCount(ctx, wordcount.Config{}, func(c *workers.Config) {
		c.Guarantee, c.NoDedup, c.Metrics = workers.AtLeastOnce, true, reg
	})
	stop()
	switch {
	case err != nil:
		return nil, 0, 0, err
	case lostWords > 0:
		return nil, 0, 0, fmt.Errorf("lost %d words", lostWords)
	case scrapeErr != nil:
		return nil, 0, 0, scrapeErr
	case withMetrics && scrapes == 0:
		return nil, 0, 0, errors.New("no scrape during the run found its figures; give it a larger input")
	}
	return sum, scrapes, page, nil
}

// scrapeUntil gets url every scrapeEvery until quit is closed, as
// Prometheus would. It returns how many pages had the runtime's figures
// (the first may come before the run shows itself) and the size of the
// last.
func scrapeUntil(quit <-chan struct{}, url string) (scrapes, page int, err error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	t := time.NewTicker(scrapeEvery)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return scrapes, page, nil
		case <-t.C:
		}
		resp, err := client.Get(url)
		if err != nil {
			return scrapes, page, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return scrapes, page, err
		case resp.StatusCode != http.StatusOK:
			return scrapes, page, fmt.Errorf("scraping %s: %s", url, resp.Status)
		case strings.Contains(string(body), "ackflow_emitted_total{"):
			scrapes, page = scrapes+1, len(body)
		}
	}
}
