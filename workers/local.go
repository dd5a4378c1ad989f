package workers

import (
	"context"
	"slices"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
)

// RunLocal runs topo in this process until every spout is exhausted and
// everything in flight is processed, or ctx is cancelled. Unless
// cfg.NATSURL is set, it starts an embedded NATS server for the run.
func RunLocal(ctx context.Context, topo *topology.Topology, cfg Config) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := newPlan(topo, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.checkpointEvery() > 0 {
		if err := p.positioned(); err != nil {
			return nil, err
		}
	}
	cfg.Logger = cfg.Logger.With().Str("topology", topo.Name).Logger()
	return runInProcessCluster(ctx, topo, cfg, p.refs())
}

// natsFor returns the NATS server a local run uses: cfg.NATSURL, or an
// embedded server for the run (with JetStream only for a dead-letter
// stream), which shutdown stops, and the options that connect to it: the
// run's own server is reached through memory (embednats.InProcess), which
// at a paced load cost a fifth fewer cores and a lower tail than loopback
// TCP (docs/performance.md, round twenty).
func natsFor(cfg Config) (url string, opts []nats.Option, shutdown func(), err error) {
	if cfg.NATSURL != "" {
		return cfg.NATSURL, cfg.NATSOptions, func() {}, nil
	}
	srv, err := embednats.Start(embednats.Config{NoJetStream: !cfg.DeadLetterStream || cfg.DeadLetters != nil})
	if err != nil {
		return "", nil, nil, err
	}
	return srv.URL(), slices.Concat([]nats.Option{srv.InProcess()}, cfg.NATSOptions), srv.Shutdown, nil
}
