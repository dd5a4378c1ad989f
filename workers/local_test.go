package workers_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/wire"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// numbers emits 0..n-1, pacing itself so that a run lasts about d.
type numbers struct {
	n, next int64
	base    int64 // the first value: it emits base..base+n-1
	d       time.Duration
	start   time.Time
	out     topology.SpoutCollector
	stream  string
}

func (s *numbers) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	s.out, s.start = out, time.Now()
	if s.stream == "" {
		s.stream = topology.DefaultStream
	}
	return nil
}

func (s *numbers) Next(context.Context) error {
	if s.next >= s.n {
		return topology.ErrExhausted
	}
	if s.d > 0 && time.Since(s.start) < time.Duration(float64(s.d)*float64(s.next)/float64(s.n)) {
		return nil
	}
	for i := 0; i < 50 && s.next < s.n; i++ {
		s.out.EmitTo(s.stream, topology.MsgID{Offset: s.next}, topology.Values{s.base + s.next})
		s.next++
	}
	return nil
}

func (s *numbers) Ack(topology.MsgID)  {}
func (s *numbers) Fail(topology.MsgID) {}
func (s *numbers) Close() error        { return nil }

func numbersTopology(t *testing.T, name string, spout func() topology.Spout, mid func() topology.Bolt, sink *flowtest.Sink) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder(name)
	b.Spout("numbers", spout, 1).Outputs("n")
	b.Bolt("mid", mid, 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("mid", topology.Global())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// pass forwards its input, anchored.
type pass struct{ out topology.Collector }

func (p *pass) Prepare(_ topology.TaskContext, out topology.Collector) error {
	p.out = out
	return nil
}
func (p *pass) Execute(in *topology.Tuple) {
	p.out.Emit(in, in.Values)
	p.out.Ack(in)
}
func (p *pass) Cleanup() error { return nil }

func exactlyOnceEach(t *testing.T, sink *flowtest.Sink, n int64) {
	t.Helper()
	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := int64(0); i < n; i++ {
		if seen[i] != 1 {
			t.Fatalf("record %d reached the sink %d times", i, seen[i])
		}
	}
}

// untilRecordsFlow returns a channel closed once a run's progress counts
// records, and what configures the run to report its progress.
func untilRecordsFlow() (<-chan struct{}, func(*workers.Config)) {
	flowing := make(chan struct{})
	var once sync.Once
	return flowing, func(c *workers.Config) {
		c.ProgressEvery = 10 * time.Millisecond
		c.Progress = func(p workers.Progress) {
			if p.Records > 0 {
				once.Do(func() { close(flowing) })
			}
		}
	}
}

func TestGarbageFramesAreCountedAndDropped(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, err := embednats.Start(embednats.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const n = 20000
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "garbage", func() topology.Spout { return &numbers{n: n, d: 1500 * time.Millisecond} },
		func() topology.Bolt { return &pass{} }, sink)

	good, err := wire.AppendFrame(nil, &wire.Frame{Kind: wire.KindData, Src: 0, Epoch: 1, Seq: 1 << 40, Records: []wire.Record{
		{ID: 1, Stream: "default", SrcTask: 0, Epoch: 1, Values: []any{int64(1)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wrongVersion := append([]byte(nil), good...)
	wrongVersion[1] = wire.Version + 1
	ack, _ := wire.AppendFrame(nil, &wire.Frame{Kind: wire.KindAck, Acks: []wire.AckMsg{{Type: wire.AckAck, Tree: 1, Val: 2}}})
	badSrc, _ := wire.AppendFrame(nil, &wire.Frame{Kind: wire.KindData, Records: []wire.Record{{ID: 9, Stream: "default", SrcTask: 99, Values: []any{int64(1)}}}})
	rng := rand.New(rand.NewPCG(1, 2))
	var garbage [][]byte
	for i := 0; i < 20; i++ {
		b := make([]byte, rng.IntN(200))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		garbage = append(garbage, b)
	}
	for cut := 1; cut < len(good); cut += 3 {
		garbage = append(garbage, good[:cut])
	}
	garbage = append(garbage, wrongVersion, ack, badSrc)

	flowing, progress := untilRecordsFlow()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		// Once records flow, every task has subscribed.
		select {
		case <-flowing:
		case <-time.After(30 * time.Second):
			t.Error("no record flowed in 30 s")
			return
		}
		for _, subj := range []string{"ackflow.garbage.task.1", "ackflow.garbage.task.2", "ackflow.garbage.task.3"} {
			for _, g := range garbage {
				nc.Publish(subj, g)
			}
		}
		nc.Flush()
	}()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Workers: 2, Configure: func(c *workers.Config) {
		c.NATSURL = srv.URL()
		progress(c)
	}})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Every frame but the unsequenced valid one to task 1 counts as bad:
	// random bytes, truncations, wrong version, wrong kind, unknown source.
	// Under cluster mode's control plane a well-formed frame of an epoch
	// before the generation's is fenced (and counted so) before anything
	// else is checked.
	want := int64(3*len(garbage) - 3)
	if sum.BadFrames+sum.FencedFrames < want {
		t.Fatalf("counted %d bad frames and %d fenced, published at least %d", sum.BadFrames, sum.FencedFrames, want)
	}
	// The run was not disturbed: every record arrived exactly once (the one
	// forged record with a valid envelope may add a "1").
	seen := map[int64]int{}
	for _, v := range sink.Values() {
		seen[v[0].(int64)]++
	}
	for i := int64(0); i < n; i++ {
		if seen[i] < 1 || (i != 1 && seen[i] != 1) {
			t.Fatalf("record %d reached the sink %d times", i, seen[i])
		}
	}
}

// flaky panics the first time it sees a multiple of 97.
type flaky struct {
	out  topology.Collector
	mu   *sync.Mutex
	seen map[int64]bool
}

func (f *flaky) Prepare(_ topology.TaskContext, out topology.Collector) error {
	f.out = out
	return nil
}

// firstSight reports whether k is seen for the first time, and marks it seen.
func firstSight[K comparable](mu *sync.Mutex, seen map[K]bool, k K) bool {
	mu.Lock()
	defer mu.Unlock()
	first := !seen[k]
	seen[k] = true
	return first
}

func (f *flaky) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	if n%97 == 0 && firstSight(f.mu, f.seen, n) {
		panic("flaky bolt")
	}
	f.out.Emit(in, in.Values)
	f.out.Ack(in)
}
func (f *flaky) Cleanup() error { return nil }

func TestPanickingBoltFailsInputAndReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	sink := flowtest.NewSink()
	var mu sync.Mutex
	seen := map[int64]bool{}
	topo := numbersTopology(t, "flaky", func() topology.Spout { return &numbers{n: n} },
		func() topology.Bolt { return &flaky{mu: &mu, seen: seen} }, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	mid := sum.Component("mid")
	if mid.Panics != (n+96)/97 {
		t.Fatalf("%d panics, want %d", mid.Panics, (n+96)/97)
	}
	if sum.Component("numbers").Replayed < mid.Panics {
		t.Fatalf("%d replays for %d failed inputs", sum.Component("numbers").Replayed, mid.Panics)
	}
	exactlyOnceEach(t, sink, n)
}

// refusing emits on an undeclared stream and keeps the errors it gets.
type refusing struct {
	numbers
	errs []error
}

func (r *refusing) Next(context.Context) error {
	if r.next >= r.n {
		return topology.ErrExhausted
	}
	r.errs = append(r.errs, r.out.EmitTo("wrong", topology.MsgID{Offset: r.next}, topology.Values{r.next}))
	r.next++
	return nil
}

func TestEmitOnUndeclaredStreamIsRefusedAndDeadLettered(t *testing.T) {
	defer goleak.VerifyNone(t)
	sink := flowtest.NewSink()
	var spouts []*refusing
	topo := numbersTopology(t, "bad", func() topology.Spout {
		r := &refusing{numbers: numbers{n: 10}}
		spouts = append(spouts, r)
		return r
	}, func() topology.Bolt { return &pass{} }, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The runtime may make an instance only to look at its type
	// (topology.Builder.Spout); one task ran.
	ran := slices.DeleteFunc(spouts, func(r *refusing) bool { return len(r.errs) == 0 })
	if len(ran) != 1 || len(ran[0].errs) != 10 {
		t.Fatalf("%d spout instances refused emits, want 1 with 10 refusals", len(ran))
	}
	for _, err := range ran[0].errs {
		if !errors.Is(err, workers.ErrEmitRefused) || !strings.Contains(err.Error(), `stream "wrong"`) || !strings.Contains(err.Error(), "numbers") {
			t.Fatalf("want an error naming the component and the undeclared stream, got %v", err)
		}
	}
	if c := sum.Component("numbers"); c.EmitErrors != 10 || c.DeadLettered != 10 || len(sum.DeadLetters) != 10 {
		t.Fatalf("emit errors %d, dead-lettered %d, letters %d; want 10 each", c.EmitErrors, c.DeadLettered, len(sum.DeadLetters))
	}
	if l := sum.DeadLetters[0]; !strings.Contains(l.Error, `stream "wrong"`) || l.Values[0] != int64(l.Offset) {
		t.Fatalf("dead letter %+v", l)
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for name, edit := range map[string]func(*workers.Config){
		"checkpoints at-most-once":   func(c *workers.Config) { c.Guarantee, c.CheckpointEvery = workers.AtMostOnce, time.Second },
		"exactly-once without dedup": func(c *workers.Config) { c.Guarantee, c.NoDedup = workers.ExactlyOnce, true },
		"resume without a store":     func(c *workers.Config) { c.Guarantee, c.Resume = workers.ExactlyOnce, true },
		"unknown guarantee":          func(c *workers.Config) { c.Guarantee = 7 },
	} {
		cfg := workers.DefaultConfig()
		edit(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := workers.ParseGuarantee("maybe-once"); err == nil {
		t.Fatal("unknown guarantee accepted")
	}
}

// halfPanicky is a reusing basic bolt that emits (n, "a") and (n, "b"),
// and, the first time it sees a multiple of 13, emits the first and then
// panics: a failed partial emit.
type halfPanicky struct {
	mu   *sync.Mutex
	seen map[int64]bool
}

func (*halfPanicky) Prepare(topology.TaskContext) error { return nil }
func (*halfPanicky) Cleanup() error                     { return nil }
func (h *halfPanicky) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	n, _ := in.Int(0)
	out.Emit(topology.Values{n, "a"})
	if n%13 == 0 && firstSight(h.mu, h.seen, n) {
		panic("half emitted")
	}
	out.Emit(topology.Values{n, "b"})
	return nil
}

// panickyCounter counts (n, tag) in keyed state and passes it on, as
// keyedCounter does; the first time it sees a key whose n is a multiple
// of 29 it panics before counting.
type panickyCounter struct {
	keyedCounter
	seen map[string]bool
}

func (p *panickyCounter) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	tag, _ := in.String(1)
	key := fmt.Sprintf("%d%s", n, tag)
	if n%29 == 0 && firstSight(p.mu, p.seen, key) {
		panic("before counting")
	}
	p.counts.Add(key, 1)
	p.out.Emit(in, topology.Values{key})
	p.out.Ack(in)
}

// TestPanicsMidFrameLoseNothing: bolts that panic in the middle of their
// frames (a reusing basic bolt after a partial emit, a stateful bolt
// before it counts), under frame loss: every panic fails its input, the
// records after it in the frame are processed, the replays reach the
// stateful bolt, whose state counts each output once, and the sink gets
// each once.
func TestPanicsMidFrameLoseNothing(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 5000
	var mu sync.Mutex
	seen, seenCount, result := map[int64]bool{}, map[string]bool{}, map[string]int64{}
	sink := flowtest.NewSink()
	b := topology.NewBuilder("panics")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: n} }, 1).Outputs("n")
	b.BasicBolt("split", func() topology.BasicBolt { return &halfPanicky{mu: &mu, seen: seen} }, 2).ReuseInputs().
		Input("numbers", topology.Shuffle()).Outputs("n", "tag")
	b.Bolt("count", func() topology.Bolt {
		return &panickyCounter{keyedCounter: keyedCounter{mu: &mu, result: result}, seen: seenCount}
	}, 2).KeyedState().
		Input("split", topology.Fields("n", "tag")).Outputs("key")
	b.Bolt("sink", sink.StatefulBolt, 1).Input("count", topology.Shuffle())
	sum, err := flowtest.Run(context.Background(), build(t, b), flowtest.Options{Guarantee: workers.AtLeastOnce,
		Chaos: chaos.Config{Drop: 0.02, Seed: 17}, Configure: func(c *workers.Config) { c.MaxAttempts = 0 }})
	if err != nil {
		t.Fatal(err)
	}
	// A record the task skipped after a panic would come back only by a
	// timeout's replay, which hides the loss: none may time out.
	if to := sum.Component("numbers").TimedOut; to != 0 {
		t.Errorf("%d trees timed out", to)
	}
	if got, want := sum.Component("split").Panics, int64((n+12)/13); got != want {
		t.Errorf("split panicked %d times, want %d", got, want)
	}
	if got, want := sum.Component("count").Panics, int64(2*((n+28)/29)); got != want {
		t.Errorf("count panicked %d times, want %d", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	got := map[string]int{}
	for _, v := range sink.Values() {
		got[v[0].(string)]++
	}
	for i := int64(0); i < n; i++ {
		for _, tag := range []string{"a", "b"} {
			k := fmt.Sprintf("%d%s", i, tag)
			if result[k] != 1 || got[k] != 1 {
				t.Fatalf("%s counted %d times and reached the sink %d times, want once each", k, result[k], got[k])
			}
		}
	}
	if len(result) != 2*n || len(got) != 2*n {
		t.Fatalf("%d keys counted and %d reached the sink, want %d", len(result), len(got), 2*n)
	}
}
