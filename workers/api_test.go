package workers_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// ticker counts tick tuples and forwards ordinary inputs.
type ticker struct {
	pass
	ticks *atomic.Int64
}

func (tk *ticker) Execute(in *topology.Tuple) {
	if in.Stream == topology.TickStream {
		tk.ticks.Add(1)
		tk.out.Ack(in) // a no-op for ticks, and harmless
		return
	}
	tk.pass.Execute(in)
}

func TestTickTuples(t *testing.T) {
	defer goleak.VerifyNone(t)
	var ticks atomic.Int64
	sink := flowtest.NewSink()
	b := topology.NewBuilder("ticks")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: 2000, d: 500 * time.Millisecond} }, 1).Outputs("n")
	b.Bolt("mid", func() topology.Bolt { return &ticker{ticks: &ticks} }, 1).Input("numbers", topology.Shuffle()).Outputs("n").Tick(20 * time.Millisecond)
	b.Bolt("sink", sink.Bolt, 1).Input("mid", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce}); err != nil {
		t.Fatal(err)
	}
	if n := ticks.Load(); n < 5 {
		t.Fatalf("%d ticks in a run of about 500 ms at one per 20 ms", n)
	}
	exactlyOnceEach(t, sink, 2000)
}

// slow holds every input for longer than the message timeout, resetting its
// timeout meanwhile, then acks.
type slow struct {
	out     topology.Collector
	held    []*topology.Tuple
	reset   bool
	started time.Time
}

func (s *slow) Prepare(_ topology.TaskContext, out topology.Collector) error {
	s.out = out
	return nil
}

func (s *slow) Execute(in *topology.Tuple) {
	if in.Stream != topology.TickStream {
		if s.started.IsZero() {
			s.started = time.Now()
		}
		s.held = append(s.held, in)
		return
	}
	if s.reset {
		for _, h := range s.held {
			s.out.ResetTimeout(h)
		}
	}
	if time.Since(s.started) > 600*time.Millisecond && !s.started.IsZero() {
		for _, h := range s.held {
			s.out.Emit(h, h.Values)
			s.out.Ack(h)
		}
		s.held = nil
	}
}

func (s *slow) Cleanup() error { return nil }

func TestResetTimeoutKeepsSlowTreesAlive(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, reset := range []bool{true, false} {
		sink := flowtest.NewSink()
		b := topology.NewBuilder("slow")
		b.Spout("numbers", func() topology.Spout { return &numbers{n: 100} }, 1).Outputs("n")
		b.Bolt("mid", func() topology.Bolt { return &slow{reset: reset} }, 1).Input("numbers", topology.Global()).Outputs("n").Tick(50 * time.Millisecond)
		b.Bolt("sink", sink.Bolt, 1).Input("mid", topology.Shuffle())
		topo, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, MessageTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		timedOut := sum.Component("numbers").TimedOut
		if reset && timedOut != 0 {
			t.Fatalf("with ResetTimeout %d trees timed out", timedOut)
		}
		if !reset && timedOut == 0 {
			t.Fatal("without ResetTimeout no tree timed out: the test cannot tell the difference")
		}
	}
}

// selfReplaying records Ack and Fail calls and replays nothing itself.
type selfReplaying struct {
	numbers
	mu           *sync.Mutex
	acked, faild map[int64]int
}

func (s *selfReplaying) ReplaysItself() bool { return true }
func (s *selfReplaying) Ack(id topology.MsgID) {
	s.mu.Lock()
	s.acked[id.Offset]++
	s.mu.Unlock()
}
func (s *selfReplaying) Fail(id topology.MsgID) {
	s.mu.Lock()
	s.faild[id.Offset]++
	s.mu.Unlock()
}

func TestSelfReplayingSpoutGetsFailAndNoReplay(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n = 3000
	var mu sync.Mutex
	acked, failed := map[int64]int{}, map[int64]int{}
	sink := flowtest.NewSink().FailFirst(0.05)
	topo := numbersTopology(t, "selfreplay", func() topology.Spout {
		return &selfReplaying{numbers: numbers{n: n}, mu: &mu, acked: acked, faild: failed}
	}, func() topology.Bolt { return &pass{} }, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee:      workers.AtLeastOnce,
		Chaos:          chaos.Config{Drop: 0.05, Seed: 2},
		MessageTimeout: 500 * time.Millisecond,
		Configure:      func(c *workers.Config) { c.BatchSize = 32 },
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Component("numbers").Replayed != 0 {
		t.Fatalf("the runtime replayed %d records of a self-replaying spout", sum.Component("numbers").Replayed)
	}
	if len(failed) == 0 {
		t.Fatal("no Fail reached the spout although the sink failed records")
	}
	for i := int64(0); i < n; i++ {
		if acked[i]+failed[i] != 1 {
			t.Fatalf("record %d: acked %d times, failed %d times; want exactly one verdict", i, acked[i], failed[i])
		}
	}
}

// untracked emits without message IDs: nothing is acked, failed or replayed.
type untracked struct{ numbers }

func (u *untracked) Next(context.Context) error {
	if u.next >= u.n {
		return topology.ErrExhausted
	}
	u.out.EmitUntracked(topology.DefaultStream, topology.Values{u.next})
	u.next++
	return nil
}

func TestUntrackedEmitsAreNotAcked(t *testing.T) {
	defer goleak.VerifyNone(t)
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "untracked", func() topology.Spout { return &untracked{numbers{n: 500}} }, func() topology.Bolt { return &pass{} }, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Component("numbers").Acked != 0 || sum.AckMessages != 0 {
		t.Fatalf("untracked records were tracked: %d acked, %d acker messages", sum.Component("numbers").Acked, sum.AckMessages)
	}
	exactlyOnceEach(t, sink, 500)
}
