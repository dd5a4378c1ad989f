package flowtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
)

// Options for Run. The zero value is at-most-once on 2 workers without chaos.
type Options struct {
	Guarantee   workers.Guarantee
	Workers     int            // default 2
	Parallelism map[string]int // overrides by component name
	Chaos       chaos.Config
	// MessageTimeout defaults to 2s, so that a test under chaos does not
	// wait out the production default of 30s for a lost tree.
	MessageTimeout time.Duration
	// Timeout bounds the whole run (default 2 minutes).
	Timeout time.Duration
	// Logger receives the runtime's logs (default: workers.DefaultConfig's,
	// warnings and errors to stderr).
	Logger *zerolog.Logger
	// Configure, if set, edits the full runtime config last.
	Configure func(*workers.Config)
}

// Run runs topo until its spouts are exhausted and everything in flight is
// processed, and returns the run's summary.
func Run(ctx context.Context, topo *topology.Topology, o Options) (*workers.Summary, error) {
	cfg := workers.DefaultConfig()
	cfg.Guarantee = o.Guarantee
	cfg.Workers = 2
	if o.Workers > 0 {
		cfg.Workers = o.Workers
	}
	cfg.Parallelism = o.Parallelism
	cfg.Chaos = o.Chaos
	cfg.MessageTimeout = 2 * time.Second
	if o.MessageTimeout > 0 {
		cfg.MessageTimeout = o.MessageTimeout
	}
	if o.Logger != nil {
		cfg.Logger = *o.Logger
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	timeout := 2 * time.Minute
	if o.Timeout > 0 {
		timeout = o.Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return workers.RunLocal(ctx, topo, cfg)
}

// Sink is a bolt that records every input it receives and acks it. Give
// sink.Bolt (or sink.StatefulBolt) to the builder as the factory; all of
// the sink's tasks share what they record.
type Sink struct {
	mu        sync.Mutex
	recs      []Record
	failFirst float64
	failed    map[uint64]bool
	failures  int
}

// Record is one input a sink received.
type Record struct {
	ID        uint64
	Component string
	Stream    string
	Task      int // the task that emitted it
	Values    topology.Values
}

// NewSink returns an empty sink.
func NewSink() *Sink { return &Sink{failed: map[uint64]bool{}} }

// FailFirst makes the sink fail the first delivery of about the fraction p
// of the records it receives (chosen by record ID, so the choice is the
// same in every run) and accept later ones: a source of replays that loss
// recovery does not hide. It returns s.
func (s *Sink) FailFirst(p float64) *Sink {
	s.failFirst = p
	return s
}

// Failures is how many deliveries FailFirst failed.
func (s *Sink) Failures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// Bolt is the factory to pass to Builder.Bolt. At-least-once, the sink may
// receive a record more than once.
func (s *Sink) Bolt() topology.Bolt { return &sinkBolt{s: s} }

// StatefulBolt is Bolt for a sink that implements topology.Stateful, so
// that the runtime's dedup stands in front of it: it receives every
// record once while its tasks live.
func (s *Sink) StatefulBolt() topology.Bolt { return &statefulSink{sinkBolt{s: s}} }

// Records returns everything received so far, in arrival order per task.
func (s *Sink) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.recs...)
}

// Values returns the values of everything received.
func (s *Sink) Values() []topology.Values {
	recs := s.Records()
	out := make([]topology.Values, len(recs))
	for i, r := range recs {
		out[i] = r.Values
	}
	return out
}

type sinkBolt struct {
	s   *Sink
	out topology.Collector
}

func (b *sinkBolt) Prepare(_ topology.TaskContext, out topology.Collector) error {
	b.out = out
	return nil
}

func (b *sinkBolt) Execute(in *topology.Tuple) {
	b.s.mu.Lock()
	if b.s.failFirst > 0 && !b.s.failed[in.ID] && unit(in.ID) < b.s.failFirst {
		b.s.failed[in.ID] = true
		b.s.failures++
		b.s.mu.Unlock()
		b.out.FailWith(in, errors.New("flowtest: sink fails a first delivery"))
		return
	}
	b.s.recs = append(b.s.recs, Record{ID: in.ID, Component: in.Component, Stream: in.Stream, Task: in.Task, Values: in.Values})
	b.s.mu.Unlock()
	b.out.Ack(in)
}

func (b *sinkBolt) Cleanup() error { return nil }

// unit maps a record ID to [0, 1).
func unit(id uint64) float64 {
	id ^= id >> 33
	id *= 0xff51afd7ed558ccd
	id ^= id >> 33
	return float64(id>>11) / (1 << 53)
}

// statefulSink is a sinkBolt the runtime treats as stateful. Its state is
// the shared record list, which a test inspects; it has nothing of its own
// to snapshot.
type statefulSink struct{ sinkBolt }

func (*statefulSink) Snapshot() ([]byte, error) { return nil, nil }
func (*statefulSink) Restore([]byte) error      { return nil }
