package workers_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// Overload (issue: hardening, item 3). A source offers records on a clock,
// like a queue filling in front of the topology; the runtime takes them
// only as fast as its pending bounds allow, so what it cannot take waits in
// the source (the lag), not in the runtime's memory. The tests check that
// the heap plateaus, complete latency stays bounded, and every record the
// runtime took reaches the sink.

// offer is the source: on a clock, rate records a second (0: as many as
// the runtime takes) for dur. It remembers when it emitted each record,
// to measure complete latency per window of the run.
type offer struct {
	rate  float64
	dur   time.Duration
	pad   string
	start time.Time
	next  int64
	out   topology.SpoutCollector
	o     *overloadRun
}

// overloadRun is what a run's spout and sink share with the test. Every
// slice is allocated before the run, so the test's own bookkeeping does
// not grow the heap it measures.
type overloadRun struct {
	emitAt []int64  // UnixNano of the first emit, by record
	seen   []uint32 // deliveries to the sink, by record
	// Complete latency by window of the run: a histogram of power-of-two
	// microsecond buckets per window.
	window  time.Duration
	lat     [][40]int64
	acked   atomic.Int64
	failed  atomic.Int64
	emitted atomic.Int64
	lag     atomic.Int64 // offered but never taken, at the end
	opens   atomic.Int64 // spout instances: a second one starts the offer again
}

func newOverloadRun(capacity int, dur, window time.Duration) *overloadRun {
	return &overloadRun{emitAt: make([]int64, capacity), seen: make([]uint32, capacity), window: window,
		lat: make([][40]int64, int(dur/window)+1)} // the last window takes every later ack
}

func (s *offer) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	s.out, s.start = out, time.Now()
	s.o.opens.Add(1)
	return nil
}

func (s *offer) Next(context.Context) error {
	now := time.Now()
	elapsed := now.Sub(s.start)
	if elapsed >= s.dur {
		if s.rate > 0 {
			s.o.lag.Store(int64(s.rate*s.dur.Seconds()) - s.next)
		}
		return topology.ErrExhausted
	}
	n := int64(256)
	if s.rate > 0 {
		n = min(n, int64(s.rate*elapsed.Seconds())-s.next)
	}
	for ; n > 0 && s.next < int64(len(s.o.emitAt)); n-- {
		s.o.emitAt[s.next] = now.UnixNano()
		s.out.Emit(topology.MsgID{Offset: s.next}, topology.Values{s.next, s.pad})
		s.next++
		s.o.emitted.Add(1)
	}
	return nil
}

func (s *offer) Ack(id topology.MsgID) {
	now := time.Now()
	d := now.UnixNano() - s.o.emitAt[id.Offset]
	b := min(39, max(0, int(math.Log2(float64(max(d, 1000))/1000))+1))
	s.o.lat[min(len(s.o.lat)-1, int(now.Sub(s.start)/s.o.window))][b]++
	s.o.acked.Add(1)
}

func (s *offer) Fail(topology.MsgID) { s.o.failed.Add(1) }
func (s *offer) Close() error        { return nil }

// p99 is the 99th percentile of a window's histogram: the upper bound of
// the bucket it falls in.
func p99(h *[40]int64) time.Duration {
	var total, seen int64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0
	}
	for b, c := range h {
		if seen += c; seen >= total*99/100 {
			return time.Duration(1<<b) * time.Microsecond
		}
	}
	return time.Duration(1<<39) * time.Microsecond
}

// work spends cost of CPU per input and forwards it.
type work struct {
	cost time.Duration
	out  topology.Collector
}

func (w *work) Prepare(_ topology.TaskContext, out topology.Collector) error {
	w.out = out
	return nil
}

func (w *work) Execute(in *topology.Tuple) {
	for t := time.Now(); time.Since(t) < w.cost; {
	}
	w.out.Emit(in, in.Values)
	w.out.Ack(in)
}

func (w *work) Cleanup() error { return nil }

// tallySink counts deliveries per record into the run's preallocated
// slice and acks; it is stateful, so dedup stands in front of it.
type tallySink struct {
	o   *overloadRun
	out topology.Collector
}

func (s *tallySink) Prepare(_ topology.TaskContext, out topology.Collector) error {
	s.out = out
	return nil
}

func (s *tallySink) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	atomic.AddUint32(&s.o.seen[n], 1)
	s.out.Ack(in)
}

func (s *tallySink) Cleanup() error            { return nil }
func (s *tallySink) Snapshot() ([]byte, error) { return nil, nil }
func (s *tallySink) Restore([]byte) error      { return nil }

type overloadConfig struct {
	rate     float64       // offered records/s, 0: as fast as taken
	dur      time.Duration // of the offer
	cost     time.Duration // CPU per record in each of the two work tasks
	pad      int           // bytes of payload per record
	natsURL  string
	timeout  time.Duration // message timeout; 0 is the default
	capacity int           // the most records the run can take
	sample   func(elapsed time.Duration)
	chaos    chaos.Config
}

// runOverload runs spout -> work (2 tasks) -> sink, at-least-once with
// dedup, on 2 workers.
func runOverload(t *testing.T, c overloadConfig) (*workers.Summary, *overloadRun) {
	t.Helper()
	o := newOverloadRun(c.capacity, c.dur, 5*time.Second)
	b := topology.NewBuilder("overload")
	b.Spout("offer", func() topology.Spout { return &offer{rate: c.rate, dur: c.dur, pad: strings.Repeat("p", c.pad), o: o} }, 1).Outputs("n", "pad")
	b.Bolt("work", func() topology.Bolt { return &work{cost: c.cost} }, 2).Input("offer", topology.Shuffle()).Outputs("n", "pad")
	b.Bolt("sink", func() topology.Bolt { return &tallySink{o: o} }, 1).Input("work", topology.Global())
	topo := build(t, b)
	cfg := workers.DefaultConfig()
	cfg.Workers = 2
	cfg.NATSURL = c.natsURL
	cfg.MaxAttempts = 0 // the oracle needs every record taken; none may be given up on
	if c.timeout > 0 {
		cfg.MessageTimeout = c.timeout
	}
	cfg.ProgressEvery = time.Second
	cfg.Chaos = c.chaos
	start := time.Now()
	if c.sample != nil {
		cfg.Progress = func(p workers.Progress) { c.sample(p.Elapsed) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.dur+3*time.Minute)
	defer cancel()
	sum, err := workers.RunLocal(ctx, topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := o.opens.Load(); n != 1 {
		// A moved spout starts again from nothing (no checkpoints), so the
		// tallies below would not mean what they say.
		t.Fatalf("the spout opened %d times: a slot moved during a run without crashes (the log says why)", n)
	}
	emitted := o.emitted.Load()
	if int(emitted) >= c.capacity {
		t.Fatalf("the source reached its capacity of %d records; the test is wrong", c.capacity)
	}
	var missing, extra int64
	for i := range emitted {
		if o.seen[i] == 0 {
			missing++
		}
	}
	for i := emitted; i < int64(len(o.seen)); i++ {
		if o.seen[i] != 0 {
			extra++
		}
	}
	t.Logf("%.0f records/s offered for %v: %d taken in %v (%.0f/s), %d never taken (lag); %d acked, %d failed and replayed; slow consumers %d, reconnects %d, NACKs %d, resent %d, lost frames %d",
		c.rate, c.dur, emitted, time.Since(start).Round(time.Millisecond), float64(emitted)/c.dur.Seconds(), o.lag.Load(), o.acked.Load(), o.failed.Load(),
		sum.SlowConsumers, sum.Reconnects, sum.NACKs, sum.Resent, sum.LostFrames)
	if missing > 0 || extra > 0 || o.acked.Load() != emitted || sum.DeadLettered > 0 {
		t.Fatalf("%d records taken never reached the sink, %d reached it without being taken, %d of %d acked, %d dead-lettered", missing, extra, o.acked.Load(), emitted, sum.DeadLettered)
	}
	return sum, o
}

// heapSampler samples the live heap (after a collection) every call.
type heapSampler struct {
	mu      sync.Mutex
	samples []heapSample
}

type heapSample struct {
	at   time.Duration
	heap uint64
}

func (h *heapSampler) sample(at time.Duration) {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	h.mu.Lock()
	h.samples = append(h.samples, heapSample{at, m.HeapAlloc})
	h.mu.Unlock()
}

// peak is the largest sample in [from, to).
func (h *heapSampler) peak(from, to time.Duration) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var p uint64
	for _, s := range h.samples {
		if s.at >= from && s.at < to {
			p = max(p, s.heap)
		}
	}
	return p
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// TestOverloadTwiceCapacityForAMinute measures what the topology takes
// when offered more than it can process, then offers twice that for 60 s:
// the live heap must plateau (its peak over the last 20 s no more than a
// quarter above its peak over seconds 10 to 30), the p99 complete latency
// of the last window times its throughput (the records in flight) must
// stay within twice that of the first full window, and far below the
// message timeout; every record taken must reach the sink.
func TestOverloadTwiceCapacityForAMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of overload")
	}
	const cost = 20 * time.Microsecond
	// What the topology takes when the source never runs dry.
	_, probe := runOverload(t, overloadConfig{dur: 5 * time.Second, cost: cost, pad: 64, capacity: 50_000_000})
	capacity := float64(probe.emitted.Load()) / 5
	offered := 2 * capacity
	const dur = 60 * time.Second
	var heap heapSampler
	sum, o := runOverload(t, overloadConfig{rate: offered, dur: dur, cost: cost, pad: 64, capacity: int(offered*dur.Seconds()) + 1000, sample: heap.sample})
	early, late := heap.peak(10*time.Second, 30*time.Second), heap.peak(40*time.Second, 60*time.Second)
	var lats []string
	for i := range int(dur / o.window) {
		lats = append(lats, fmt.Sprint(p99(&o.lat[i])))
	}
	first, last := p99(&o.lat[1]), p99(&o.lat[int(dur/o.window)-1])
	own := uint64(len(o.emitAt)*8 + len(o.seen)*4) // the test's bookkeeping, preallocated
	t.Logf("capacity %.0f records/s, offered %.0f for %v; live heap peak %.1f MiB over 10-30 s, %.1f MiB over 40-60 s (of which %.1f MiB the test's own arrays); p99 complete latency by 5 s window: %s; backpressure signals %d",
		capacity, offered, dur, mib(early), mib(late), mib(own), strings.Join(lats, " "), sum.BackpressureSignals)
	if o.lag.Load() < int64(capacity*dur.Seconds()/4) {
		t.Fatalf("the source was not overloaded: only %d records were never taken", o.lag.Load())
	}
	if late > early+early/4 {
		t.Fatalf("the heap grows under overload: peak %.1f MiB over 10-30 s, %.1f MiB over 40-60 s", mib(early), mib(late))
	}
	// What waits in the runtime is what must not grow: by Little's law the
	// records in flight are the latency times the rate they complete at,
	// so a window that completes fewer records (the machine busy with
	// other tests) may take longer per record without any queue growing.
	// The histogram's buckets double, so a p99 near a bound moves a whole
	// bucket from window to window (262 ms, 524 ms, 262 ms... in one CI
	// run): growth is two buckets or more. Records piling up without
	// backpressure would grow tens of times over the minute.
	firstRate, lastRate := rate(&o.lat[1], o.window), rate(&o.lat[int(dur/o.window)-1], o.window)
	if first == 0 || lastRate == 0 {
		t.Fatalf("no record completed in the first or the last full window: p99 %v at %.0f/s, %v at %.0f/s", first, firstRate, last, lastRate)
	}
	if last.Seconds()*lastRate > 4*first.Seconds()*firstRate {
		t.Fatalf("the records in flight grow under overload: p99 complete latency %v at %.0f records/s in the first full window, %v at %.0f/s in the last", first, firstRate, last, lastRate)
	}
	if timeout := workers.DefaultConfig().MessageTimeout; last > timeout/4 {
		t.Fatalf("complete latency under overload nears the message timeout (%v), where trees would time out and replay: p99 %v in the last window", timeout, last)
	}
}

// rate is the records a window's histogram counts, per second.
func rate(h *[40]int64, window time.Duration) float64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return float64(n) / window.Seconds()
}

// TestSlowConsumerIsNeverSilentLoss overloads a topology through a NATS
// server that lets only 256 KiB queue for a client: the server closes the
// connections of workers that fall behind, the frames it had queued are
// lost, and the runtime must notice each loss (NACK and resend, or a tree
// that times out and replays): every record taken reaches the sink.
func TestSlowConsumerIsNeverSilentLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("overload with slow consumers")
	}
	srv, err := embednats.Start(embednats.Config{NoJetStream: true, MaxPending: 256 << 10, MaxPayload: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	const cost = 5 * time.Microsecond
	sum, _ := runOverload(t, overloadConfig{rate: 50_000, dur: 5 * time.Second, cost: cost, pad: 2048, natsURL: srv.URL(), capacity: 260_000,
		timeout: 2 * time.Second}) // frames given up on time out sooner than after 30 s
	if sum.SlowConsumers+sum.Reconnects == 0 {
		t.Fatal("no slow consumer and no reconnection: the test proves nothing")
	}
}
