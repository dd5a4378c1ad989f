package workers_test

import (
	"context"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// TestAtMostOnceCrashesAccountForEveryRecord crashes workers under an
// at-most-once chain whose middle bolt is slow, so that crashes catch
// records queued for a task that stops (at the bound of its inbox, where
// delivery blocks) and records emitted but not yet sent. At-most-once
// replays none of them, so each is a loss the summary must count: every
// record missing at the sink is dropped by chaos, fenced, unaccounted (in
// flight at the end) or discarded, and none arrives twice. Each source
// record makes one record at every hop, so a loss anywhere is one missing
// record at the sink. The discarded-records metric, which is all a
// cluster shows of these losses, equals the summary's figure.
func TestAtMostOnceCrashesAccountForEveryRecord(t *testing.T) {
	defer goleak.VerifyNone(t)
	if testing.Short() {
		t.Skip("crashes workers for seconds")
	}
	const n = 6000
	quiet := zerolog.Nop()
	discarded := false
	for seed := uint64(1); seed <= 2; seed++ {
		sink := flowtest.NewSink()
		reg := metrics.NewRegistry()
		b := topology.NewBuilder("amocrash")
		b.Spout("numbers", func() topology.Spout { return &numbers{n: n, d: 2 * time.Second} }, 1).Outputs("n")
		b.Bolt("slow", func() topology.Bolt { return &sleepy{d: 400 * time.Microsecond} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
		b.Bolt("pass", func() topology.Bolt { return &pass{} }, 2).Input("slow", topology.Shuffle()).Outputs("n")
		b.Bolt("sink", sink.Bolt, 1).Input("pass", topology.Global())
		sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
			Guarantee: workers.AtMostOnce,
			Workers:   4,
			Chaos:     chaos.Config{CrashEvery: 150 * time.Millisecond, Seed: seed},
			Logger:    &quiet,
			Configure: func(c *workers.Config) { c.BatchSize, c.QueueSize, c.Metrics = 8, 2, reg },
		})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]int{}
		for _, v := range sink.Values() {
			seen[v[0].(int64)]++
		}
		var missing int64
		for i := range int64(n) {
			switch c := seen[i]; {
			case c > 1:
				t.Errorf("seed %d: record %d reached the sink %d times under at-most-once", seed, i, c)
			case c == 0:
				missing++
			}
		}
		accounted := sum.Chaos.RecordsDropped + sum.FencedRecords + sum.Unaccounted + sum.Discarded
		t.Logf("seed %d: %d crashes, %d of %d missing; %d fenced, %d unaccounted, %d discarded, %d publish errors",
			seed, sum.Crashes, missing, n, sum.FencedRecords, sum.Unaccounted, sum.Discarded, sum.PublishErrors)
		if missing > accounted {
			t.Errorf("seed %d: %d records missing at the sink, the summary accounts for %d (%d fenced, %d unaccounted, %d discarded)",
				seed, missing, accounted, sum.FencedRecords, sum.Unaccounted, sum.Discarded)
		}
		if got := gatherRegistry(t, reg).sum("ackflow_discarded_records_total", nil); got != float64(sum.Discarded) {
			t.Errorf("seed %d: ackflow_discarded_records_total is %v, the summary's Discarded %d", seed, got, sum.Discarded)
		}
		if sum.Crashes == 0 {
			t.Fatalf("seed %d: no crash: the test proves nothing", seed)
		}
		discarded = discarded || sum.Discarded > 0
	}
	if !discarded {
		t.Fatal("no crash discarded a record in any run: the test proves nothing")
	}
}
