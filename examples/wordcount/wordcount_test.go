package wordcount_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// randomText writes random lines to a file and returns its path and the
// oracle: the counts of the words the generator wrote, computed without the
// topology's split.
func randomText(t *testing.T, lines int, seed uint64) (string, map[string]int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	oracle, err := wordcount.RandomText(f, lines, seed)
	if err != nil {
		t.Fatal(err)
	}
	return path, oracle
}

func compare(t *testing.T, got, want map[string]int64) {
	t.Helper()
	bad := 0
	for w, n := range want {
		if got[w] != n {
			if bad++; bad <= 10 {
				t.Errorf("word %q: got %d, want %d", w, got[w], n)
			}
		}
	}
	for w := range got {
		if _, ok := want[w]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("word %q counted %d times but not in the input", w, got[w])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d words differ from the oracle (%d words in the oracle)", bad, len(want))
	}
}

func TestWordCountExactAtMostOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	path, oracle := randomText(t, 30000, 42)
	job, err := wordcount.New(wordcount.Config{Input: path, Lines: 2, Split: 3, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Workers = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	compare(t, job.Counts.Map(), oracle)
	if sum.NATSRecordsOut == 0 || sum.NATSMessagesOut == 0 {
		t.Fatalf("no record crossed NATS: %+v", sum)
	}
	if sum.Component("lines").Emitted != 30000 {
		t.Fatalf("spouts emitted %d lines, want 30000", sum.Component("lines").Emitted)
	}
	fmt.Printf("%d records in %v (%.0f/s), %d NATS msgs\n", sum.Records, sum.Duration, sum.RecordsPerSec, sum.NATSMessagesOut)
}

// atLeast checks the at-least-once promise: every word of the oracle is
// there and none is counted less often than it occurs.
func atLeast(t *testing.T, got, want map[string]int64) {
	t.Helper()
	bad := 0
	for w, n := range want {
		if got[w] < n {
			if bad++; bad <= 10 {
				t.Errorf("word %q: counted %d, occurs %d times", w, got[w], n)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d words lost", bad)
	}
}

// atMost checks the at-most-once promise: nothing is counted more often
// than it occurs, and nothing is invented.
func atMost(t *testing.T, got, want map[string]int64) {
	t.Helper()
	for w, n := range got {
		if n > want[w] {
			t.Fatalf("word %q: counted %d, occurs only %d times", w, n, want[w])
		}
	}
}

func runWordCount(t *testing.T, lines int, seed uint64, edit func(*workers.Config)) (*workers.Summary, map[string]int64, map[string]int64) {
	return runPaced(t, lines, 0, seed, edit)
}

// runPaced is runWordCount with the spout paced to linesPerSec (0: unpaced),
// so that a run lasts long enough for crashes to happen during it.
func runPaced(t *testing.T, lines int, linesPerSec float64, seed uint64, edit func(*workers.Config)) (*workers.Summary, map[string]int64, map[string]int64) {
	t.Helper()
	path, oracle := randomText(t, lines, seed)
	job, err := wordcount.New(wordcount.Config{Input: path, Lines: 1, Split: 3, Count: 2, LinesPerSec: linesPerSec})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Workers = 3
	cfg.Ackers = 2
	cfg.MessageTimeout = time.Second
	edit(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records in %v; spout: acked %d failed %d replayed %d timed out %d; chaos %+v; crashes %d, recoveries %v",
		sum.Records, sum.Duration, sum.Component("lines").Acked, sum.Component("lines").Failed,
		sum.Component("lines").Replayed, sum.Component("lines").TimedOut, sum.Chaos, sum.Crashes, sum.Recoveries)
	return sum, job.Counts.Map(), oracle
}

// lossy loses, duplicates, reorders and delays frames, which loss recovery
// repairs, and fails a few inputs in bolts, which only replays repair.
var lossy = chaos.Config{Drop: 0.05, Dup: 0.01, Reorder: 0.1, Delay: 2 * time.Millisecond, DelayProb: 0.3, Fail: 0.005, Seed: 7}

func TestAtLeastOnceNoChaosIsExact(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, got, oracle := runWordCount(t, 20000, 43, func(c *workers.Config) { c.Guarantee = workers.AtLeastOnce })
	compare(t, got, oracle)
}

func TestAtLeastOnceUnderLossyChaos(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runWordCount(t, 20000, 44, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = lossy
		c.BatchSize = 64
	})
	atLeast(t, got, oracle)
	if sum.Chaos.RecordsDropped == 0 || sum.Resent == 0 || sum.Component("lines").Replayed == 0 {
		t.Fatalf("chaos dropped nothing (%d), nothing was resent (%d) or replayed (%d); the test proves nothing",
			sum.Chaos.RecordsDropped, sum.Resent, sum.Component("lines").Replayed)
	}
}

func TestAtMostOnceUnderLossyChaosEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runWordCount(t, 20000, 45, func(c *workers.Config) {
		c.Chaos = lossy
		c.BatchSize = 64
	})
	atMost(t, got, oracle)
	if sum.Chaos.RecordsDropped == 0 || sum.Chaos.FramesDuplicated == 0 {
		t.Fatalf("chaos did not drop and duplicate; the test proves nothing: %+v", sum.Chaos)
	}
}

func TestAtLeastOnceWithWorkerCrashes(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runPaced(t, 30000, 8000, 46, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = chaos.Config{CrashEvery: time.Second, Seed: 5}
		c.MessageTimeout = 20 * time.Second // recovery must not come from timeouts
		c.MaxSpoutPending = 512
	})
	atLeast(t, got, oracle)
	if sum.Crashes == 0 || len(sum.Recoveries) == 0 {
		t.Fatalf("no crash happened or none recovered: %d crashes, recoveries %v", sum.Crashes, sum.Recoveries)
	}
	if sum.Component("lines").TimedOut > 0 {
		t.Fatalf("%d trees waited for the message timeout; crashes must be detected", sum.Component("lines").TimedOut)
	}
	for _, d := range sum.Recoveries {
		if d > 10*time.Second {
			t.Fatalf("recovery took %v", d)
		}
	}
}

var lossyDup = chaos.Config{Drop: 0.05, Dup: 0.05, Reorder: 0.1, Delay: 2 * time.Millisecond, DelayProb: 0.3, Fail: 0.01, Seed: 17}

func TestDedupMakesAtLeastOnceExactUnderChaos(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runWordCount(t, 20000, 47, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = lossyDup
		c.BatchSize = 64
	})
	compare(t, got, oracle)
	count := sum.Component("count")
	if count.DuplicatesDropped == 0 || sum.Component("lines").Replayed == 0 {
		t.Fatalf("no duplicate was dropped (%d) or nothing replayed; the test proves nothing", count.DuplicatesDropped)
	}
	t.Logf("count dropped %d duplicates, %d suspects", count.DuplicatesDropped, count.Suspects)
}

func TestWithoutDedupChaosDoubleCounts(t *testing.T) {
	// The control for the test above: the same chaos without dedup counts
	// some words more than once, so the exact result above is dedup's work.
	defer goleak.VerifyNone(t)
	_, got, oracle := runWordCount(t, 20000, 47, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = lossyDup
		c.BatchSize = 64
		c.NoDedup = true
	})
	atLeast(t, got, oracle)
	over := 0
	for w, n := range got {
		if n > oracle[w] {
			over++
		}
	}
	if over == 0 {
		t.Fatal("without dedup no word was counted twice; the chaos is too weak to prove anything")
	}
}

func TestDedupExactWhenStatelessWorkerCrashes(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runPaced(t, 12000, 4000, 48, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = lossyDup
		c.Chaos.CrashEvery = time.Second
		c.BatchSize = 64
		c.MaxSpoutPending = 512
	})
	compare(t, got, oracle)
	if sum.Crashes == 0 {
		t.Fatal("no worker crashed")
	}
}

func TestTinyBloomFilterLosesNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	sum, got, oracle := runWordCount(t, 20000, 49, func(c *workers.Config) {
		c.Guarantee = workers.AtLeastOnce
		c.Chaos = lossyDup
		c.BatchSize = 64
		// About half of all never-seen IDs look "maybe seen" once the
		// newest generation is full. The window is one the run fills
		// (each count task checks about 90,000 IDs): a split-block filter
		// far below its capacity almost never says maybe, since all eight
		// of an ID's bits must be set. 65,536 IDs still span more than the
		// message timeout's worth of checks (1 s, about 30,000).
		c.Dedup.FPRate = 0.5
		c.Dedup.Generations = 2
		c.Dedup.Window = 1 << 16
	})
	compare(t, got, oracle)
	count := sum.Component("count")
	if count.Suspects == 0 {
		t.Fatal("no Bloom suspect was counted; the filter is not tiny enough to prove anything")
	}
	t.Logf("suspects %d, duplicates %d, est. false-positive rate %.2f", count.Suspects, count.DuplicatesDropped, count.BloomFPRate)
}

// TestHugeRatesMeanUnpaced: a rate too large to pace (1e30, +Inf) reads as
// fast as flow control allows instead of overflowing into a stall, and a
// rate that is not a number is refused.
func TestHugeRatesMeanUnpaced(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, rate := range []float64{1e30, math.Inf(1)} {
		job, err := wordcount.New(wordcount.Config{LinesPerSec: rate})
		if err != nil {
			t.Fatal(err)
		}
		cfg := workers.DefaultConfig()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sum, err := workers.RunLocal(ctx, job.Topology, cfg)
		cancel()
		if err != nil {
			t.Fatalf("rate %v: %v", rate, err)
		}
		if sum.Component("lines").Emitted == 0 {
			t.Fatalf("rate %v: nothing read", rate)
		}
	}
	for _, rate := range []float64{math.NaN(), -1} {
		if _, err := wordcount.New(wordcount.Config{LinesPerSec: rate}); err == nil {
			t.Fatalf("rate %v accepted", rate)
		}
	}
}

// TestReadBytesReachesTotal: the counter the CLI's progress bar reads
// ends at the input's size, for the bundled text and for a file, with
// several spout tasks.
func TestReadBytesReachesTotal(t *testing.T) {
	defer goleak.VerifyNone(t)
	path, _ := randomText(t, 5000, 50)
	for _, input := range []string{"", path} {
		job, err := wordcount.New(wordcount.Config{Input: input, Lines: 3})
		if err != nil {
			t.Fatal(err)
		}
		if job.ReadBytes() != 0 || job.TotalBytes == 0 {
			t.Fatalf("input %q: read %d of %d bytes before the run", input, job.ReadBytes(), job.TotalBytes)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = workers.RunLocal(ctx, job.Topology, workers.DefaultConfig())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if job.ReadBytes() != job.TotalBytes {
			t.Fatalf("input %q: read %d of %d bytes", input, job.ReadBytes(), job.TotalBytes)
		}
	}
}
