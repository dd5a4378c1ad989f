package sources

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
)

// connect opens the spout task's own NATS connection. Each task has its
// own so that closing one task never cuts another's subscriptions. The
// name shows up in the server's connection list (nats server report
// connections), which is where one looks for a stuck spout.
//
// With no URL of its own, it connects as the task's worker does
// (TaskContext.NATSURL and NATSOptions).
func connect(url string, options []nats.Option, tc topology.TaskContext) (*nats.Conn, error) {
	name := fmt.Sprintf("ackflow %s/%s[%d]", tc.Topology, tc.Component, tc.Index)
	opts := []nats.Option{nats.Name(name)}
	if url == "" {
		url = tc.NATSURL
		opts = append(opts, tc.NATSOptions...)
	}
	if url == "" {
		return nil, errors.New("sources: the NATS URL is empty; give one, e.g. nats://127.0.0.1:4222")
	}
	opts = append(opts, options...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("sources: cannot connect to NATS at %s: %w; check the URL, the credentials in Options, and that the server is running", url, err)
	}
	if tc.Context != nil {
		// A task whose worker dies is never closed: its connection goes
		// with the task.
		context.AfterFunc(tc.Context, nc.Close)
	}
	return nc, nil
}

// sampled counts events that are logged sparingly: the first, then every
// 1000th, so that a flood of them shows in the log without flooding it.
type sampled struct{ n atomic.Int64 }

// add counts one event and says whether to log it.
func (s *sampled) add() (count int64, log bool) {
	n := s.n.Add(1)
	return n, n%1000 == 1
}

func (s *sampled) load() int64 { return s.n.Load() }
