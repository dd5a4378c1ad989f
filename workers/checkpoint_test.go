package workers_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// rewindable is the numbers spout with a position: the next number.
type rewindable struct{ numbers }

func (r *rewindable) Position() ([]byte, error) { return binary.AppendVarint(nil, r.next), nil }
func (r *rewindable) Seek(pos []byte) error {
	n, k := binary.Varint(pos)
	if k <= 0 {
		return errors.New("bad position")
	}
	r.next = n
	// Pace from here on, not from the first number again.
	r.start = time.Now().Add(-time.Duration(float64(r.d) * float64(n) / float64(max(r.n, 1))))
	return nil
}

// keyedCounter counts its inputs in keyed state and, when its task ends
// normally, adds what the state holds to a shared result: crashed tasks
// never get there, so the result is what the surviving state says.
type keyedCounter struct {
	out    topology.Collector
	counts *topology.Counters
	mu     *sync.Mutex
	result map[string]int64
}

func (k *keyedCounter) Prepare(tc topology.TaskContext, out topology.Collector) error {
	k.out, k.counts = out, tc.State.Counters("seen")
	return nil
}

func (k *keyedCounter) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	k.counts.Add(strconv.FormatInt(n, 10), 1)
	k.out.Emit(in, topology.Values{n})
	k.out.Ack(in)
}

func (k *keyedCounter) Cleanup() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.counts.Range(func(key string, n int64) bool {
		k.result[key] += n
		return true
	})
	return nil
}

func checkpointTopology(t *testing.T, name string, n int64, d time.Duration, result map[string]int64, mu *sync.Mutex) *topology.Topology {
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: n, d: d}} }, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("count", func() topology.Bolt { return &keyedCounter{mu: mu, result: result} }, 2).KeyedState().
		Input("pre", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("count", topology.Shuffle())
	return build(t, b)
}

func expectCounted(t *testing.T, result map[string]int64, n int64) {
	t.Helper()
	// Report every wrong count, not the first: which records are missing
	// (one, a run of them, every key of a key group) tells what lost them.
	var wrong []string
	for i := int64(0); i < n; i++ {
		if got := result[strconv.FormatInt(i, 10)]; got != 1 {
			wrong = append(wrong, fmt.Sprintf("%d counted %d times", i, got))
		}
	}
	if len(wrong) > 0 {
		shown := wrong[:min(len(wrong), 20)]
		t.Fatalf("%d of %d records counted wrongly, want each once: %s", len(wrong), n, strings.Join(shown, ", "))
	}
	if len(result) != int(n) {
		t.Fatalf("%d keys counted, want %d", len(result), n)
	}
}

// runExactlyOnceUnderCrashes runs topo exactly-once on 3 workers under
// frame chaos, injected failures and a crash of any worker every
// crashEvery, with checkpoints every 200 ms, fails the test unless
// workers crashed, the run rolled back and checkpoints were taken, and
// returns the summary and the checkpoint store.
func runExactlyOnceUnderCrashes(t *testing.T, topo *topology.Topology, crashEvery time.Duration, seed uint64) (*workers.Summary, checkpoint.Store) {
	t.Helper()
	store := checkpoint.NewMemory()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.ExactlyOnce,
		Workers:   3,
		Chaos:     chaos.Config{Drop: 0.03, Dup: 0.02, Reorder: 0.05, Fail: 0.005, CrashEvery: crashEvery, Seed: seed},
		Configure: func(c *workers.Config) {
			c.CheckpointEvery = 200 * time.Millisecond
			c.MaxAttempts = 0
			c.Checkpoints = store
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sum.Checkpoints
	t.Logf("%v; checkpoints %+v; crashes %d; recoveries %v", sum.Duration, c, sum.Crashes, sum.Recoveries)
	if sum.Crashes == 0 || c.Rollbacks == 0 || c.Taken == 0 {
		t.Fatalf("crashes %d, rollbacks %d, checkpoints %d: the test proves nothing", sum.Crashes, c.Rollbacks, c.Taken)
	}
	return sum, store
}

// finalCounts returns the "seen" counters of the count tasks in the
// run's final checkpoint: its end state. The tasks' Cleanup adds the same
// to the test's result when they stop, but crash chaos may crash a worker
// after the final checkpoint, before its tasks stopped, and then their
// part of the result is missing although nothing was lost (seen under
// the load of a full CI run: 1,999 of 4,000 keys, one task's key groups,
// counted 0 times, in a run of 13 crashes and 12 recoveries).
func finalCounts(t *testing.T, store checkpoint.Store, topo *topology.Topology, sum *workers.Summary) map[string]int64 {
	t.Helper()
	got, err := workers.CheckpointedCounters(context.Background(), store, topo.Name, topo.KeyGroups, sum.Checkpoints.Latest, "count", "seen")
	if err != nil {
		t.Fatalf("reading the final checkpoint %d: %v", sum.Checkpoints.Latest, err)
	}
	return got
}

// TestExactlyOnceStateSurvivesCrashesOfAnyWorker crashes workers at random,
// those with the spout and the keyed state included, under frame chaos and
// injected failures: the state the run ends with counts every input once.
func TestExactlyOnceStateSurvivesCrashesOfAnyWorker(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 4000
	var mu sync.Mutex
	result := map[string]int64{}
	topo := checkpointTopology(t, "eo-crash", n, 3*time.Second, result, &mu)
	sum, store := runExactlyOnceUnderCrashes(t, topo, 800*time.Millisecond, 41)
	expectCounted(t, finalCounts(t, store, topo, sum), n)
}

// TestResumeFromCheckpointDirectory stops a run midway and starts it again
// from its checkpoint directory: nothing is counted twice or skipped.
func TestResumeFromCheckpointDirectory(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	dir := t.TempDir()
	store, err := checkpoint.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	result := map[string]int64{}
	cfg := func(resume bool) func(*workers.Config) {
		return func(c *workers.Config) {
			c.CheckpointEvery = 100 * time.Millisecond
			c.Checkpoints, c.Resume = store, resume
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	first, err := flowtest.Run(ctx, checkpointTopology(t, "resume", n, 3*time.Second, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(false)})
	if err == nil || first == nil || first.Checkpoints.Taken == 0 {
		t.Fatalf("the first run should be stopped midway after checkpoints: %v %+v", err, first)
	}
	// The stopped run's tasks ran Cleanup: forget what they added, since
	// the state of the resumed run starts from the checkpoint.
	mu.Lock()
	clear(result)
	mu.Unlock()
	second, err := flowtest.Run(context.Background(), checkpointTopology(t, "resume", n, 0, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(true)})
	if err != nil {
		t.Fatal(err)
	}
	if second.Checkpoints.RestoredFrom == 0 {
		t.Fatal("the second run did not resume from a checkpoint")
	}
	t.Logf("resumed from epoch %d (of %d taken)", second.Checkpoints.RestoredFrom, first.Checkpoints.Taken)
	expectCounted(t, result, n)
}

// TestResumeWithOtherParallelism stops a run midway and resumes it with
// three counting tasks instead of two (and one "pre" instead of two): the
// keyed state is split by key group, so nothing is counted twice or lost.
// Changing the spout's parallelism is refused with a reason.
func TestResumeWithOtherParallelism(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	store := checkpoint.NewMemory()
	var mu sync.Mutex
	result := map[string]int64{}
	cfg := func(resume bool, par map[string]int) func(*workers.Config) {
		return func(c *workers.Config) {
			c.CheckpointEvery = 100 * time.Millisecond
			c.Checkpoints, c.Resume, c.Parallelism = store, resume, par
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	first, err := flowtest.Run(ctx, checkpointTopology(t, "rescale", n, 3*time.Second, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(false, nil)})
	if err == nil || first == nil || first.Checkpoints.Taken == 0 {
		t.Fatalf("the first run should be stopped midway after checkpoints: %v %+v", err, first)
	}
	mu.Lock()
	clear(result)
	mu.Unlock()
	_, err = flowtest.Run(context.Background(), checkpointTopology(t, "rescale", n, 0, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(true, map[string]int{"numbers": 2})})
	if err == nil || !strings.Contains(err.Error(), "spout numbers had 1 tasks") {
		t.Fatalf("resuming with another spout parallelism: %v", err)
	}
	mu.Lock()
	clear(result)
	mu.Unlock()
	second, err := flowtest.Run(context.Background(), checkpointTopology(t, "rescale", n, 0, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Workers: 2, Configure: cfg(true, map[string]int{"count": 3, "pre": 1})})
	if err != nil {
		t.Fatal(err)
	}
	if second.Checkpoints.RestoredFrom == 0 {
		t.Fatal("the second run did not resume from a checkpoint")
	}
	expectCounted(t, result, n)
}

// TestAtLeastOnceWithCheckpointsLosesNothing: with checkpoints on,
// at-least-once survives crashes of any worker too.
func TestAtLeastOnceWithCheckpointsLosesNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	var mu sync.Mutex
	result := map[string]int64{}
	topo := checkpointTopology(t, "alo-crash", n, 2*time.Second, result, &mu)
	store := checkpoint.NewMemory()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Workers:   3,
		Chaos:     chaos.Config{Drop: 0.03, Fail: 0.005, CrashEvery: 700 * time.Millisecond, Seed: 43},
		Configure: func(c *workers.Config) {
			c.CheckpointEvery = 150 * time.Millisecond
			c.MaxAttempts = 0
			c.Checkpoints = store
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Crashes == 0 || sum.Checkpoints.Rollbacks == 0 {
		t.Fatalf("crashes %d, rollbacks %d: the test proves nothing", sum.Crashes, sum.Checkpoints.Rollbacks)
	}
	expectCounted(t, finalCounts(t, store, topo, sum), n)
}

// TestCorruptCheckpointFallsBackToThePreviousOne corrupts the newest
// checkpoint of a stopped run: resuming refuses it, says why, and restores
// the one before, still counting everything once.
func TestCorruptCheckpointFallsBackToThePreviousOne(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	store := checkpoint.NewMemory()
	var mu sync.Mutex
	result := map[string]int64{}
	cfg := func(resume bool) func(*workers.Config) {
		return func(c *workers.Config) {
			c.CheckpointEvery, c.KeepCheckpoints = 100*time.Millisecond, 5
			c.Checkpoints, c.Resume = store, resume
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := flowtest.Run(ctx, checkpointTopology(t, "corrupt", n, 3*time.Second, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(false)}); err == nil {
		t.Fatal("the first run should be stopped midway")
	}
	epochs, err := checkpoint.ListEpochs(context.Background(), store, "corrupt")
	if err != nil || len(epochs) < 2 || epochs[0].Manifest == nil {
		t.Fatalf("epochs %+v, %v", epochs, err)
	}
	newest := epochs[0]
	obj := newest.Manifest.Tasks[0].Object
	blob, _ := store.Get(context.Background(), obj)
	blob[len(blob)-1] ^= 0xff
	store.Put(context.Background(), obj, blob)
	mu.Lock()
	clear(result)
	mu.Unlock()
	lines := &logLines{}
	lg := zerolog.New(lines).Level(zerolog.WarnLevel)
	sum, err := flowtest.Run(context.Background(), checkpointTopology(t, "corrupt", n, 0, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: cfg(true), Logger: &lg})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Checkpoints.RestoredFrom == 0 || sum.Checkpoints.RestoredFrom >= newest.Epoch {
		t.Fatalf("restored from epoch %d; the corrupted one is %d", sum.Checkpoints.RestoredFrom, newest.Epoch)
	}
	expectCounted(t, result, n)
	if !lines.has(fmt.Sprintf("epoch %d", newest.Epoch)) {
		t.Fatalf("no warning names the refused epoch %d:\n%s", newest.Epoch, lines.String())
	}
}

// logLines keeps log lines for a test to look at.
type logLines struct{ testbuf.Buffer }

func (l *logLines) has(s string) bool { return strings.Contains(l.String(), s) }

// plainSpout cannot rewind.
type plainSpout struct{ numbers }

func TestCheckpointsNeedSpoutsThatRewind(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := topology.NewBuilder("plain")
	b.Spout("numbers", func() topology.Spout { return &plainSpout{numbers{n: 10}} }, 1).Outputs("n")
	b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("numbers", topology.Shuffle())
	_, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{Guarantee: workers.ExactlyOnce})
	if err == nil || !strings.Contains(err.Error(), "spout numbers cannot rewind") {
		t.Fatalf("got %v", err)
	}
}

// outage is a checkpoint store that fails every write while down is set,
// as a full disk or an unreachable object store would.
type outage struct {
	*checkpoint.Memory
	down   atomic.Bool
	failed atomic.Int64
}

func (o *outage) Put(ctx context.Context, name string, data []byte) error {
	if o.down.Load() {
		o.failed.Add(1)
		return fmt.Errorf("checkpoint: cannot store %s: no space left on device (injected)", name)
	}
	return o.Memory.Put(ctx, name, data)
}

// TestCheckpointStoreFailures takes the checkpoint store away for part of
// an exactly-once run with crashes: the checkpoints of that time are
// abandoned, counted and logged with the store's error, the run goes on,
// later checkpoints succeed, and a crash during the outage rolls back to
// the last good one, so every input still counts once.
func TestCheckpointStoreFailures(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 4000
	store := &outage{Memory: checkpoint.NewMemory()}
	var mu sync.Mutex
	result := map[string]int64{}
	lines := &logLines{}
	lg := zerolog.New(lines).Level(zerolog.WarnLevel)
	go func() {
		time.Sleep(700 * time.Millisecond)
		store.down.Store(true)
		time.Sleep(900 * time.Millisecond)
		store.down.Store(false)
	}()
	topo := checkpointTopology(t, "outage", n, 3*time.Second, result, &mu)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.ExactlyOnce,
		Workers:   3,
		Chaos:     chaos.Config{CrashEvery: time.Second, Seed: 44},
		Logger:    &lg,
		Configure: func(c *workers.Config) {
			c.CheckpointEvery = 100 * time.Millisecond
			c.Checkpoints = store
			c.MaxAttempts = 0
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sum.Checkpoints
	t.Logf("%v; checkpoints %+v; %d writes failed; crashes %d", sum.Duration, c, store.failed.Load(), sum.Crashes)
	if store.failed.Load() == 0 || c.Abandoned == 0 || c.Taken == 0 || sum.Crashes == 0 {
		t.Fatalf("writes failed %d, abandoned %d, taken %d, crashes %d: the test proves nothing", store.failed.Load(), c.Abandoned, c.Taken, sum.Crashes)
	}
	if !lines.has("checkpoint abandoned") || !lines.has("no space left on device (injected)") {
		t.Fatalf("no warning says a checkpoint was abandoned and why:\n%.3000s", lines.String())
	}
	expectCounted(t, finalCounts(t, store, topo, sum), n)
}

// holdingSpout emits the numbers from first to first+n-1 unpaced, but
// stops halfway until it has been opened a second time: until a rollback
// restarted it.
type holdingSpout struct {
	rewindable
	half  int64
	opens *atomic.Int32
}

func (s *holdingSpout) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.opens.Add(1)
	return s.rewindable.Open(tc, out)
}

func (s *holdingSpout) Next(ctx context.Context) error {
	if s.next >= s.half && s.opens.Load() < 2 {
		time.Sleep(time.Millisecond)
		return nil
	}
	return s.rewindable.Next(ctx)
}

// offsetTopology is checkpointTopology whose spout emits the numbers from
// first to first+n-1, holding halfway until a rollback when opens is set.
func offsetTopology(t *testing.T, name string, first, n int64, opens *atomic.Int32, result map[string]int64, mu *sync.Mutex) *topology.Topology {
	b := topology.NewBuilder(name)
	b.Spout("numbers", func() topology.Spout {
		s := &rewindable{numbers{n: first + n, next: first}}
		if opens == nil {
			return s
		}
		return &holdingSpout{rewindable: *s, half: first + n/2, opens: opens}
	}, 1).Outputs("n")
	b.Bolt("pre", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("count", func() topology.Bolt { return &keyedCounter{mu: mu, result: result} }, 2).KeyedState().
		Input("pre", topology.Fields("n")).Outputs("n")
	b.Bolt("sink", flowtest.NewSink().Bolt, 1).Input("count", topology.Shuffle())
	return build(t, b)
}

// TestARunWithoutResumeNeverRestoresAnEarlierRunsCheckpoint: a run that
// does not resume shares its checkpoint store with an earlier run of the
// same topology, and loses a worker before its own first checkpoint. The
// rollback starts its sources over; it must not restore the earlier run's
// checkpoint, whose state and positions belong to other input (before,
// it did: the run's state held the earlier run's keys and its spout
// skipped its own first numbers).
func TestARunWithoutResumeNeverRestoresAnEarlierRunsCheckpoint(t *testing.T) {
	defer goleak.VerifyNone(t)
	store, err := checkpoint.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	earlier := map[string]int64{}
	first, err := flowtest.Run(context.Background(), offsetTopology(t, "floor", 0, 1000, nil, earlier, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce,
		Configure: func(c *workers.Config) { c.CheckpointEvery, c.Checkpoints = time.Hour, store }})
	if err != nil {
		t.Fatal(err)
	}
	if first.Checkpoints.Latest == 0 {
		t.Fatal("the earlier run left no checkpoint: the test proves nothing")
	}
	result := map[string]int64{}
	var opens atomic.Int32
	second, err := flowtest.Run(context.Background(), offsetTopology(t, "floor", 5000, 3000, &opens, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Workers: 3,
		Chaos:     chaos.Config{CrashEvery: time.Second, Seed: 7},
		Configure: func(c *workers.Config) { c.CheckpointEvery, c.Checkpoints = time.Hour, store }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("earlier run's checkpoint %d; this run: crashes %d, rollbacks %d, checkpoints taken %d", first.Checkpoints.Latest, second.Crashes, second.Checkpoints.Rollbacks, second.Checkpoints.Taken)
	if second.Checkpoints.Rollbacks == 0 {
		t.Fatal("no rollback: the test proves nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	expectOnly(t, result, 5000, 3000)
}

// expectOnly checks that result counts the numbers from first to
// first+n-1 once each and nothing else.
func expectOnly(t *testing.T, result map[string]int64, first, n int) {
	t.Helper()
	for k := range result {
		if v, err := strconv.Atoi(k); err != nil || v < first || v >= first+n {
			t.Fatalf("counted %q, which is not in this run's input", k)
		}
	}
	for i := first; i < first+n; i++ {
		if got := result[strconv.Itoa(i)]; got != 1 {
			t.Fatalf("%d counted %d times, want 1", i, got)
		}
	}
}

// TestFileSinkBehindADiamondIsExactlyOnce delivers through the two-phase
// commit file sink (its pending files named by the checkpoints) behind a
// diamond whose one branch is All-grouped, under frame chaos, injected
// failures and crashes of any worker: the committed parts hold every value
// once per path into the sink (one through left, one per task of right).
func TestFileSinkBehindADiamondIsExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	dir := t.TempDir()
	b := topology.NewBuilder("eo-file-diamond")
	b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: n, d: 2 * time.Second}} }, 1).Outputs("n")
	b.Bolt("left", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("right", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.All()).Outputs("n")
	b.Bolt("out", sinks.NewFile(sinks.FileConfig{Dir: dir}), 2).
		Input("left", topology.Fields("n")).Input("right", topology.Shuffle())
	runExactlyOnceUnderCrashes(t, build(t, b), 700*time.Millisecond, 43)
	lines, err := sinks.Lines(dir, "out")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	for i := int64(0); i < n; i++ {
		if got := seen[strconv.FormatInt(i, 10)]; got != 3 {
			t.Fatalf("%d delivered %d times, want 3 (left once, each right task once)", i, got)
		}
	}
	if len(lines) != 3*n {
		t.Fatalf("%d lines delivered, want %d", len(lines), 3*n)
	}
}

// slowStore is a checkpoint store whose writes wait for delay once slow
// is set, as a remote store that has become slow does.
type slowStore struct {
	checkpoint.Store
	slow  atomic.Bool
	delay time.Duration
}

func (s *slowStore) Put(ctx context.Context, name string, data []byte) error {
	if s.slow.Load() {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Put(ctx, name, data)
}

// TestAStoppedRunWaitsForItsFinalCheckpointIdle stops a run (Ctrl-C)
// while its checkpoint store is slow: the run waits for the final
// checkpoint without spinning. The loop that follows the submission once
// looked at it without pause from the stop to the end, a core's worth of
// CPU taken from the checkpoint it was waiting for.
func TestAStoppedRunWaitsForItsFinalCheckpointIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	store := &slowStore{Store: checkpoint.NewMemory(), delay: time.Second}
	var mu sync.Mutex
	result := map[string]int64{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ended struct {
		sum *workers.Summary
		err error
	}
	done := make(chan ended, 1)
	go func() {
		sum, err := flowtest.Run(ctx, checkpointTopology(t, "slow-final", 3000, 3*time.Second, result, &mu), flowtest.Options{Guarantee: workers.ExactlyOnce, Configure: func(c *workers.Config) {
			c.CheckpointEvery = 100 * time.Millisecond
			c.Checkpoints = store
		}})
		done <- ended{sum, err}
	}()
	time.Sleep(700 * time.Millisecond)
	store.slow.Store(true)
	cpu0, wall0 := processCPU(t), time.Now()
	cancel()
	e := <-done
	cpu, wall := processCPU(t)-cpu0, time.Since(wall0)
	if e.err == nil || e.sum == nil || e.sum.Checkpoints.Taken == 0 {
		t.Fatalf("the run should be stopped midway after checkpoints: %v %+v", e.err, e.sum)
	}
	t.Logf("stopped in %v with %v of CPU", wall.Round(time.Millisecond), cpu.Round(time.Millisecond))
	if wall < store.delay {
		t.Fatalf("the run stopped %v after Ctrl-C, before its final checkpoint could be written (%v)", wall, store.delay)
	}
	if cpu > wall/2 {
		t.Fatalf("waiting %v for the final checkpoint took %v of CPU: more than half a core, as a busy loop does", wall.Round(time.Millisecond), cpu.Round(time.Millisecond))
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
