package workers_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
)

// A bolt declared with ReuseInputs gets its inputs' tuples reused once
// Execute returned with them acked or failed, never while it still holds
// them; other bolts' tuples are never reused.

// pointers counts the distinct tuples a component's tasks were given.
type pointers struct {
	mu   sync.Mutex
	seen map[*topology.Tuple]bool
	runs int
}

func (p *pointers) saw(in *topology.Tuple) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[*topology.Tuple]bool{}
	}
	p.seen[in] = true
	p.runs++
}

func (p *pointers) counts() (distinct, runs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen), p.runs
}

// basicPass forwards its input as a BasicBolt.
type basicPass struct{ p *pointers }

func (b basicPass) Prepare(topology.TaskContext) error { return nil }
func (b basicPass) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	b.p.saw(in)
	return out.Emit(in.Values)
}
func (b basicPass) Cleanup() error { return nil }

// keeper holds its inputs and acks them in batches, from Execute when it
// holds 50 and from Flush otherwise, checking first that none of them
// changed while it held it.
type keeper struct {
	p    *pointers
	out  topology.Collector
	held []*topology.Tuple
	was  []int64
	bad  chan<- string
}

func (k *keeper) Prepare(_ topology.TaskContext, out topology.Collector) error {
	k.out = out
	return nil
}

func (k *keeper) Execute(in *topology.Tuple) {
	k.p.saw(in)
	k.held = append(k.held, in)
	k.was = append(k.was, in.Values[0].(int64))
	if len(k.held) >= 50 {
		k.Flush()
	}
}

func (k *keeper) Flush() {
	for i, in := range k.held {
		if len(in.Values) != 1 || in.Values[0] != k.was[i] {
			select {
			case k.bad <- fmt.Sprintf("a held input changed from %d to %v before its ack", k.was[i], in.Values):
			default:
			}
		}
		k.out.Emit(in, in.Values)
		k.out.Ack(in)
	}
	k.held, k.was = k.held[:0], k.was[:0]
}

func (k *keeper) Cleanup() error { return nil }

func TestInputsAreReusedOnlyWhenDoneAndAllowed(t *testing.T) {
	const n = 20_000
	var basic, held, plain pointers
	bad := make(chan string, 1)
	sink := flowtest.NewSink()
	b := topology.NewBuilder("reuse")
	b.Spout("numbers", paced(n, 1500*time.Millisecond), 1).Outputs("n")
	b.BasicBolt("basic", func() topology.BasicBolt { return basicPass{&basic} }, 2).ReuseInputs().Input("numbers", topology.Shuffle()).Outputs("n")
	b.Bolt("keeper", func() topology.Bolt { return &keeper{p: &held, bad: bad} }, 2).ReuseInputs().Input("basic", topology.Shuffle()).Outputs("n")
	b.BasicBolt("plain", func() topology.BasicBolt { return basicPass{&plain} }, 2).Input("keeper", topology.Shuffle()).Outputs("n")
	b.Bolt("sink", sink.Bolt, 1).Input("plain", topology.Global())
	// Frames lost and inputs failed: replays run through both bolts too.
	runShape(t, build(t, b), chaos.Config{Drop: 0.02, Fail: 0.01, Seed: 11})
	select {
	case msg := <-bad:
		t.Fatal(msg)
	default:
	}
	expectSinkAll(t, sink, n)
	if d, runs := basic.counts(); runs < n || d > runs/10 {
		t.Errorf("the basic bolt ran %d times on %d distinct tuples; its tuples should be reused", runs, d)
	}
	if d, runs := held.counts(); runs < n || d < runs*9/10 {
		t.Errorf("the keeper ran %d times on %d distinct tuples; only the input it acks in Execute may be reused", runs, d)
	}
	if d, runs := plain.counts(); runs < n || d != runs {
		t.Errorf("the bolt without ReuseInputs ran %d times on %d distinct tuples; none may be reused", runs, d)
	}
}
