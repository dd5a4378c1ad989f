package bench

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
)

// payloadRun moves n records of size bytes through spout -> pass -> sink
// at-least-once and reports the rate; it fails if a record goes missing.
func payloadRun(ctx context.Context, url string, opts []nats.Option, n, size int) (ScaleRow, error) {
	var received atomic.Int64
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	b := topology.NewBuilder("payload")
	b.Spout("gen", sources.NewSequence(int64(n), func(int64) topology.Values { return topology.Values{payload} }), 1).Outputs("data")
	b.BasicBolt("pass", func() topology.BasicBolt { return passBolt{} }, 2).Input("gen", topology.Shuffle()).Outputs("data")
	b.BasicBolt("sink", func() topology.BasicBolt { return countBolt{n: &received} }, 2).Input("pass", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		return ScaleRow{}, err
	}
	cfg := config()
	cfg.NATSURL, cfg.NATSOptions = url, opts
	cfg.Guarantee = workers.AtLeastOnce
	sum, err := workers.RunLocal(ctx, topo, cfg)
	if err != nil {
		return ScaleRow{}, fmt.Errorf("bench: %d-byte records: %w", size, err)
	}
	if got := received.Load(); got < int64(n) {
		return ScaleRow{}, fmt.Errorf("bench: %d-byte records: %d of %d reached the sink", size, got, n)
	}
	rps := sum.RecordsPerSec
	return ScaleRow{RecordBytes: size, RecordsPerSec: rps, MiBPerSec: rps * float64(size) / (1 << 20)}, nil
}

type passBolt struct{}

func (passBolt) Prepare(topology.TaskContext) error { return nil }
func (passBolt) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	out.Emit(in.Values)
	return nil
}
func (passBolt) Cleanup() error { return nil }

// countBolt counts distinct inputs; replays may repeat one, so it counts
// every input and the caller checks for at least n.
type countBolt struct{ n *atomic.Int64 }

func (countBolt) Prepare(topology.TaskContext) error { return nil }
func (c countBolt) Execute(*topology.Tuple, topology.BasicCollector) error {
	c.n.Add(1)
	return nil
}
func (countBolt) Cleanup() error { return nil }
