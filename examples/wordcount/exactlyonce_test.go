package wordcount_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// runWithUpdates runs word count on random text, paced so that crashes
// happen during it, with every count update written through the
// two-phase-commit file sink, and returns the summary, the counts, the
// oracle and the committed update lines.
func runWithUpdates(t *testing.T, g workers.Guarantee, seed uint64) (*workers.Summary, map[string]int64, map[string]int64, []string) {
	t.Helper()
	path, oracle := randomText(t, 8000, seed)
	dir := t.TempDir()
	job, err := wordcount.New(wordcount.Config{Input: path, Split: 2, Count: 2, LinesPerSec: 4000,
		Updates: sinks.NewFile(sinks.FileConfig{Dir: dir, Name: "updates"})})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Guarantee, cfg.Workers, cfg.MessageTimeout = g, 3, 2*time.Second
	cfg.CheckpointEvery = 250 * time.Millisecond
	cfg.MaxAttempts = 0
	cfg.Chaos = chaos.Config{Drop: 0.03, Dup: 0.02, Reorder: 0.05, Fail: 0.002, CrashEvery: 900 * time.Millisecond, Seed: seed}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := sinks.Lines(dir, "updates")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; %d crashes, %d rollbacks, %d checkpoints; %d update lines", sum.Duration.Round(time.Millisecond), sum.Crashes, sum.Checkpoints.Rollbacks, sum.Checkpoints.Taken, len(lines))
	if sum.Crashes == 0 || sum.Checkpoints.Rollbacks == 0 || sum.Chaos.FramesDropped == 0 {
		t.Fatalf("crashes %d, rollbacks %d, frames dropped %d: the test proves nothing", sum.Crashes, sum.Checkpoints.Rollbacks, sum.Chaos.FramesDropped)
	}
	return sum, job.Counts.Map(), oracle, lines
}

// updateCounts counts each "word<TAB>n" update line.
func updateCounts(lines []string) map[string]int {
	m := make(map[string]int, len(lines))
	for _, l := range lines {
		m[strings.TrimSuffix(l, "\n")]++
	}
	return m
}

// TestExactlyOnceWordCountUnderChaosAndCrashes: with frames lost,
// duplicated and reordered, inputs failed, and a worker crash every 0.9 s
// that may hit any worker (the spout and the counts included), the counts
// equal the oracle and every update record is in the sink exactly once.
func TestExactlyOnceWordCountUnderChaosAndCrashes(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, got, oracle, lines := runWithUpdates(t, workers.ExactlyOnce, 61)
	compare(t, got, oracle)
	seen := updateCounts(lines)
	for w, n := range oracle {
		for k := int64(1); k <= n; k++ {
			if c := seen[fmt.Sprintf("%s\t%d", w, k)]; c != 1 {
				t.Fatalf("update %s=%d is in the sink %d times, want once", w, k, c)
			}
		}
	}
	var want int64
	for _, n := range oracle {
		want += n
	}
	if int64(len(lines)) != want {
		t.Fatalf("%d update lines, want %d", len(lines), want)
	}
}

// TestAtLeastOnceWordCountWithCheckpointsLosesNothing: the same faults
// at-least-once with checkpoints: every count and every update arrives.
func TestAtLeastOnceWordCountWithCheckpointsLosesNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	_, got, oracle, lines := runWithUpdates(t, workers.AtLeastOnce, 62)
	atLeast(t, got, oracle)
	seen := updateCounts(lines)
	for w, n := range oracle {
		for k := int64(1); k <= n; k++ {
			if seen[fmt.Sprintf("%s\t%d", w, k)] == 0 {
				t.Fatalf("update %s=%d never reached the sink", w, k)
			}
		}
	}
}
