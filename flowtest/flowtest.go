package flowtest

import (
	"context"
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
	// Logger receives the runtime's logs (default: none).
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
// sink.Bolt to the builder as the factory; all of the sink's tasks share
// what they record.
type Sink struct {
	mu   sync.Mutex
	recs []Record
}

// Record is one input a sink received.
type Record struct {
	ID        uint64
	Component string
	Stream    string
	Values    topology.Values
}

// NewSink returns an empty sink.
func NewSink() *Sink { return &Sink{} }

// Bolt is the factory to pass to Builder.Bolt.
func (s *Sink) Bolt() topology.Bolt { return &sinkBolt{s: s} }

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
	b.s.recs = append(b.s.recs, Record{ID: in.ID, Component: in.Component, Stream: in.Stream, Values: in.Values})
	b.s.mu.Unlock()
	b.out.Ack(in)
}

func (b *sinkBolt) Cleanup() error { return nil }
