package workers_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// poison is a basic bolt that always fails one record with an error.
type poison struct{ bad int64 }

func (poison) Prepare(topology.TaskContext) error { return nil }
func (p poison) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	n, err := in.Int(0)
	if err != nil {
		return err
	}
	if n == p.bad {
		return errors.New("cannot parse record 13")
	}
	return out.Emit(topology.Values{n})
}
func (poison) Cleanup() error { return nil }

// deadAware is a numbers spout that records DeadLettered calls.
type deadAware struct {
	numbers
	mu   *sync.Mutex
	dead map[int64]string
}

func (d *deadAware) DeadLettered(id topology.MsgID, why string) {
	d.mu.Lock()
	d.dead[id.Offset] = why
	d.mu.Unlock()
}

// TestPoisonRecordGoesToDeadLetters: a record that always fails is
// replayed with backoff MaxAttempts times, then sent to the dead letters
// with its error; the run ends, and every other record is processed
// exactly once by the stateful sink. The dead letters are checked in each
// destination: memory, a JSON-lines file, and a JetStream stream.
func TestPoisonRecordGoesToDeadLetters(t *testing.T) {
	const n, bad, attempts = 2000, 13, 4
	for _, dest := range []string{"memory", "file", "jetstream"} {
		t.Run(dest, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			var mu sync.Mutex
			dead := map[int64]string{}
			sink := flowtest.NewSink()
			b := topology.NewBuilder("poison")
			b.Spout("numbers", func() topology.Spout { return &deadAware{numbers: numbers{n: n}, mu: &mu, dead: dead} }, 1).Outputs("n")
			b.BasicBolt("parse", func() topology.BasicBolt { return poison{bad: bad} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
			b.Bolt("sink", sink.StatefulBolt, 2).Input("parse", topology.Fields("n"))
			topo, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "dead.jsonl")
			start := time.Now()
			sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
				Guarantee: workers.AtLeastOnce,
				Timeout:   time.Minute,
				Configure: func(c *workers.Config) {
					c.MaxAttempts = attempts
					c.ReplayBackoff, c.MaxReplayBackoff = 20*time.Millisecond, 50*time.Millisecond
					switch dest {
					case "file":
						c.DeadLetters = deadletter.NewFile(path)
					case "jetstream":
						c.DeadLetterStream = true
					}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			letters := sum.DeadLetters
			if dest == "file" {
				if letters, err = deadletter.ReadFile(path); err != nil {
					t.Fatal(err)
				}
			}
			if len(letters) != 1 || sum.DeadLettered != 1 {
				t.Fatalf("%d dead letters (%d counted), want 1: %+v", len(letters), sum.DeadLettered, letters)
			}
			l := letters[0]
			if l.Offset != bad || l.Attempts != attempts || l.Component != "parse" || l.Spout != "numbers" || l.Topology != "poison" ||
				!strings.Contains(l.Error, "cannot parse record 13") || len(l.Values) != 1 || l.Values[0] != int64(bad) {
				t.Fatalf("dead letter %+v", l)
			}
			if dest == "jetstream" && sum.DeadLetterStream != "ackflow_poison_dlq" {
				t.Fatalf("stream %q", sum.DeadLetterStream)
			}
			if p := sum.Component("parse"); p.Failed != attempts {
				t.Fatalf("parse failed the poison record %d times, want %d", p.Failed, attempts)
			}
			mu.Lock()
			if len(dead) != 1 || !strings.Contains(dead[bad], "cannot parse record 13") {
				t.Fatalf("the spout heard of %v", dead)
			}
			mu.Unlock()
			got := sinkCounts(sink)
			for i := int64(0); i < n; i++ {
				if want := map[bool]int{true: 0, false: 1}[i == bad]; got[i] != want {
					t.Fatalf("record %d reached the sink %d times, want %d", i, got[i], want)
				}
			}
			t.Logf("run took %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestBackoffSpacesReplays: with a backoff, the replays of a failing record
// are spaced out instead of following each other at once.
func TestBackoffSpacesReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var seen []time.Time
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "backoff", func() topology.Spout { return &numbers{n: 1} },
		func() topology.Bolt {
			return topology.AsBolt(failAlways{record: func() { mu.Lock(); seen = append(seen, time.Now()); mu.Unlock() }})
		}, sink)
	if _, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) {
			c.MaxAttempts = 5
			c.ReplayBackoff, c.MaxReplayBackoff = 40*time.Millisecond, 100*time.Millisecond
		},
	}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 {
		t.Fatalf("%d attempts, want 5", len(seen))
	}
	// Delays after failures 2, 3 and 4: 40, 80 and 100 (capped) ms. Only
	// lower bounds are checked: a loaded machine makes them longer.
	for i, want := range []time.Duration{0, 40, 80, 100} {
		if gap := seen[i+1].Sub(seen[i]); gap < want*time.Millisecond {
			t.Fatalf("attempt %d came %v after attempt %d, want at least %v", i+2, gap, i+1, want*time.Millisecond)
		}
	}
}

type failAlways struct{ record func() }

func (failAlways) Prepare(topology.TaskContext) error { return nil }
func (f failAlways) Execute(*topology.Tuple, topology.BasicCollector) error {
	f.record()
	return errors.New("always")
}
func (failAlways) Cleanup() error { return nil }

// TestMaxAttemptsZeroReplaysUntilSuccess: 0 keeps Storm's behaviour, a
// record is replayed until it succeeds, however often that takes.
func TestMaxAttemptsZeroReplaysUntilSuccess(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	tries := 0
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "forever", func() topology.Spout { return &numbers{n: 1} },
		func() topology.Bolt {
			return topology.AsBolt(failTimes{n: 15, mu: &mu, tries: &tries})
		}, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) {
			c.MaxAttempts = 0
			c.ReplayBackoff, c.MaxReplayBackoff = time.Millisecond, 2*time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.Values()) != 1 || sum.DeadLettered != 0 || tries != 16 {
		t.Fatalf("%d records arrived after %d tries, %d dead-lettered", len(sink.Values()), tries, sum.DeadLettered)
	}
}

type failTimes struct {
	n     int
	mu    *sync.Mutex
	tries *int
}

func (failTimes) Prepare(topology.TaskContext) error { return nil }
func (f failTimes) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	f.mu.Lock()
	*f.tries++
	fail := *f.tries <= f.n
	f.mu.Unlock()
	if fail {
		return errors.New("not yet")
	}
	return out.Emit(in.Values)
}
func (failTimes) Cleanup() error { return nil }

// brokenLetters is a dead-letter destination that always fails.
type brokenLetters struct{}

func (brokenLetters) Put(context.Context, deadletter.Letter) error { return errors.New("disk full") }
func (brokenLetters) Close() error                                 { return nil }

// TestBrokenDeadLettersEndTheRun: a record that may neither be replayed
// again nor be put aside must not keep the run going forever, nor vanish:
// the run ends with an error that names the record and the cause.
func TestBrokenDeadLettersEndTheRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	sink := flowtest.NewSink()
	b := topology.NewBuilder("broken")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: 100} }, 1).Outputs("n")
	b.BasicBolt("parse", func() topology.BasicBolt { return poison{bad: 13} }, 1).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("parse", topology.Shuffle())
	_, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) {
			c.MaxAttempts, c.DeadLetters = 2, brokenLetters{}
			c.ReplayBackoff, c.MaxReplayBackoff = time.Millisecond, 10*time.Millisecond
		},
	})
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "offset 13") {
		t.Fatalf("want an error naming the record and the cause, got %v", err)
	}
}
