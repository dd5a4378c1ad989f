package workers_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// heldOpen is numbers that, once it has emitted everything, stays open
// until released: the run goes on with its tasks alive and nothing in
// flight.
type heldOpen struct {
	numbers
	emitted atomic.Bool
	release <-chan struct{}
}

func (s *heldOpen) Next(ctx context.Context) error {
	if s.next < s.n {
		return s.numbers.Next(ctx)
	}
	s.emitted.Store(true)
	select {
	case <-s.release:
		return topology.ErrExhausted
	case <-time.After(time.Millisecond):
		return nil
	}
}

// footprint runs a topology of tasks tasks (a spout, a stateless bolt and
// a stateful one with (tasks-2)/2 each, and a stateful sink) at-least-once
// on 2 workers, checks the result against the input, and returns the live
// heap once every record is processed and before the tasks stop, after
// two collections. It once read the heap in the middle of the run: on a
// loaded machine (CI runs other packages' tests beside it) a backlog of
// records held the heap up in one of the three runs and not in the others,
// and the test took it for memory per task. The second collection frees
// the resend rings earlier runs left in a sync.Pool, which survive one.
func footprint(t *testing.T, tasks int) uint64 {
	t.Helper()
	const n = 20000
	width := (tasks - 2) / 2
	tally, sink := newRuns(), flowtest.NewSink()
	b := topology.NewBuilder("wide").KeyGroups(512)
	release := make(chan struct{})
	spout := &heldOpen{numbers: numbers{n: n, d: 2 * time.Second}, release: release}
	b.Spout("numbers", func() topology.Spout { return spout }, 1).Outputs("n")
	b.Bolt("pass", func() topology.Bolt { return &pass{} }, width).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("tally", func() topology.Bolt { return &counter{runs: tally} }, width).Input("pass", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("tally", topology.Global())
	topo := build(t, b)
	var mu sync.Mutex
	var heap uint64
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Timeout:   2 * time.Minute,
		Configure: func(cfg *workers.Config) {
			cfg.ProgressEvery = 200 * time.Millisecond
			cfg.Progress = func(p workers.Progress) {
				mu.Lock()
				defer mu.Unlock()
				if heap == 0 && spout.emitted.Load() && p.Pending == 0 {
					var m runtime.MemStats
					runtime.GC()
					runtime.GC()
					runtime.ReadMemStats(&m)
					heap = m.HeapAlloc
					close(release)
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tally.expect(t, "tally", n, 1)
	expectSink(t, sink, n, 1)
	if got := 2 + 2*width; got != tasks || heap == 0 {
		t.Fatalf("%d tasks, heap %d: the test is wrong", got, heap)
	}
	t.Logf("%d tasks: %d records in %v, live heap after the last record %.1f MiB", tasks, sum.Records, sum.Duration.Round(time.Millisecond), float64(heap)/(1<<20))
	return heap
}

// TestFiveHundredTwelveTasks runs topologies of 128, 256 and 512 tasks in
// local mode (32, 64 and 128 under the race detector) and reports the
// memory each task adds: go test -run TestFiveHundredTwelveTasks -v ./workers/. Per-task structures
// sized by the number of tasks (windows of frames from every sender,
// outboxes to every receiver) would make the footprint grow with the
// square of the task count, and the memory a task adds at 512 tasks would
// be about twice that at 256; it must stay about the same.
func TestFiveHundredTwelveTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("three runs of up to 512 tasks")
	}
	n := 128
	if raceEnabled {
		// The race detector makes 512 tasks on two cores take minutes;
		// the same check runs at a quarter of the size.
		n = 32
	}
	f1, f2, f4 := footprint(t, n), footprint(t, 2*n), footprint(t, 4*n)
	low := (float64(f2) - float64(f1)) / float64(n)
	high := (float64(f4) - float64(f2)) / float64(2*n)
	t.Logf("memory per task: %.0f KiB from %d to %d tasks, %.0f KiB from %d to %d (%d tasks: %.0f MiB in all)", low/1024, n, 2*n, high/1024, 2*n, 4*n, 4*n, float64(f4)/(1<<20))
	if low <= 0 || high > 1.5*low {
		t.Fatalf("memory per task is not linear in the number of tasks: %.0f bytes per task from %d to %d tasks, %.0f from %d to %d", low, n, 2*n, high, 2*n, 4*n)
	}
}
