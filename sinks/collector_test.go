package sinks

import (
	"sync"

	"github.com/ackflow/ackflow/topology"
)

// collector is a fake topology.Collector that records acks and fails.
type collector struct {
	mu     sync.Mutex
	acked  []uint64
	failed map[uint64]error
}

func newCollector() *collector { return &collector{failed: map[uint64]error{}} }

func (c *collector) Emit(*topology.Tuple, topology.Values) error { return nil }
func (c *collector) EmitTo(string, []*topology.Tuple, topology.Values) error {
	return nil
}
func (c *collector) EmitWithID(string, uint64, []*topology.Tuple, topology.Values) error {
	return nil
}
func (c *collector) EmitDirect(int, string, []*topology.Tuple, topology.Values) error {
	return nil
}
func (c *collector) Ack(in *topology.Tuple) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked = append(c.acked, in.ID)
}
func (c *collector) Fail(in *topology.Tuple) { c.FailWith(in, nil) }
func (c *collector) FailWith(in *topology.Tuple, reason error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[in.ID] = reason
}
func (c *collector) ResetTimeout(*topology.Tuple) {}

func (c *collector) counts() (acked, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked), len(c.failed)
}

// anyFailure returns one recorded failure reason.
func (c *collector) anyFailure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.failed {
		return err
	}
	return nil
}

// tuple makes an input with the given ID and values.
func tuple(id uint64, values ...any) *topology.Tuple {
	return &topology.Tuple{ID: id, Component: "src", Stream: topology.DefaultStream, Values: values}
}
