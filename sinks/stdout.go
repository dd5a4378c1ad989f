package sinks

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/ackflow/ackflow/topology"
)

// StdoutConfig configures a Stdout sink.
type StdoutConfig struct {
	// Writer receives the output (default os.Stdout).
	Writer io.Writer
	// Format renders one input (default TabSeparated).
	Format func(*topology.Tuple) ([]byte, error)
}

var _ topology.Bolt = (*Stdout)(nil)

// NewStdout returns a bolt factory for the builder.
func NewStdout(cfg StdoutConfig) func() topology.Bolt {
	return func() topology.Bolt { return &Stdout{cfg: cfg} }
}

// writeMu serialises the writes of every Stdout sink in the process: their
// tasks usually share one writer, os.Stdout, and a record must not be cut
// by another.
var writeMu sync.Mutex

// Stdout prints each input and acks it. It is not exactly-once, whatever
// the run's guarantee: a printed line cannot be taken back, so a replayed
// record, or every record of an epoch that is rolled back, is printed
// again. Use it to watch a topology, and File or JetStream to deliver.
type Stdout struct {
	cfg StdoutConfig
	out topology.Collector
}

// Prepare fills in the defaults.
func (s *Stdout) Prepare(_ topology.TaskContext, out topology.Collector) error {
	s.out = out
	if s.cfg.Writer == nil {
		s.cfg.Writer = os.Stdout
	}
	if s.cfg.Format == nil {
		s.cfg.Format = TabSeparated
	}
	return nil
}

// Execute prints in; it fails in when it cannot.
func (s *Stdout) Execute(in *topology.Tuple) {
	if in.Stream == topology.TickStream {
		return
	}
	rec, err := s.cfg.Format(in)
	if err != nil {
		s.out.FailWith(in, fmt.Errorf("sinks: formatting record %016x: %w", in.ID, err))
		return
	}
	writeMu.Lock()
	_, err = s.cfg.Writer.Write(rec)
	writeMu.Unlock()
	if err != nil {
		s.out.FailWith(in, fmt.Errorf("sinks: printing record %016x: %w", in.ID, err))
		return
	}
	s.out.Ack(in)
}

// Cleanup does nothing: every record was written when it came.
func (s *Stdout) Cleanup() error { return nil }
