package wordcount_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// randomText writes lines of random words from a Zipf-like vocabulary and
// returns the path and the oracle counts computed independently here.
func randomText(t *testing.T, lines int, seed uint64) (string, map[string]int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	vocab := make([]string, 5000)
	for i := range vocab {
		n := 2 + rng.IntN(8)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		vocab[i] = b.String()
	}
	zipf := rand.NewZipf(rng, 1.2, 1, uint64(len(vocab)-1))
	oracle := map[string]int64{}
	var sb strings.Builder
	for i := 0; i < lines; i++ {
		n := rng.IntN(15)
		for j := 0; j < n; j++ {
			w := vocab[zipf.Uint64()]
			if j > 0 {
				sb.WriteString([]string{" ", ", ", " -- ", ". "}[rng.IntN(4)])
			}
			if rng.IntN(10) == 0 {
				sb.WriteString(strings.ToUpper(w)) // the split lowercases
			} else {
				sb.WriteString(w)
			}
			oracle[w]++
		}
		sb.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
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

func TestWordCountAtLeastOnceNoChaos(t *testing.T) {
	defer goleak.VerifyNone(t)
	path, oracle := randomText(t, 30000, 43)
	job, err := wordcount.New(wordcount.Config{Input: path, Lines: 2, Split: 3, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Workers = 3
	cfg.Guarantee = workers.AtLeastOnce
	cfg.Ackers = 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	compare(t, job.Counts.Map(), oracle)
}
