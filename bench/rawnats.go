package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// RawConfig sizes a RawNATS run. The zero value is the reference run of
// DESIGN.md section 11: one million unbatched 64-byte messages.
type RawConfig struct {
	// Messages is how many messages the publisher sends (default 1_000_000).
	Messages int
	// Size is the payload size in bytes (default 64).
	Size int
	// Timeout bounds the whole run on top of the caller's context (default
	// one minute), so that a lost message ends the run with an error instead
	// of a hang.
	Timeout time.Duration
}

func (c *RawConfig) setDefaults() {
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.Size == 0 {
		c.Size = 64
	}
	if c.Timeout == 0 {
		c.Timeout = time.Minute
	}
}

// Validate reports a configuration that cannot run. Zero fields are valid:
// they take their defaults.
func (c RawConfig) Validate() error {
	switch {
	case c.Messages < 0:
		return fmt.Errorf("bench: RawConfig.Messages is %d; want a positive count (0 means 1_000_000)", c.Messages)
	case c.Size < 0:
		return fmt.Errorf("bench: RawConfig.Size is %d; want a positive byte count (0 means 64)", c.Size)
	case c.Timeout < 0:
		return fmt.Errorf("bench: RawConfig.Timeout is %s; want a positive duration (0 means one minute)", c.Timeout)
	}
	return nil
}

// RawResult is what one RawNATS run measured.
type RawResult struct {
	// Messages is how many messages arrived (all of those sent).
	Messages int
	// Elapsed runs from the first publish to the last receive.
	Elapsed time.Duration
	// MsgsPerSec is Messages / Elapsed.
	MsgsPerSec float64
	// Dropped is what the subscriber's client dropped; a valid run has 0.
	Dropped int
}

// RawNATS measures core NATS the way `nats bench` pub/sub does: one publisher
// connection sends cfg.Messages unbatched messages of cfg.Size bytes as fast
// as it can (nats.go buffers the writes) and one subscriber connection on the
// same server counts them until all have arrived.
//
// This is the ceiling for a design that sends one NATS message per record;
// ackflow batches records, so its records per second are compared with this
// figure's messages per second.
func RawNATS(ctx context.Context, url string, cfg RawConfig) (RawResult, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return RawResult{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, cfg.Timeout,
		fmt.Errorf("the run did not finish within %s; raise RawConfig.Timeout or lower Messages", cfg.Timeout))
	defer stop()

	// A lost connection loses messages, so the run fails at once rather
	// than waiting for its timeout.
	lost := func(role string) nats.Option {
		return nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cancel(fmt.Errorf("the %s connection was lost (a subscriber that falls behind is cut by the server as a slow consumer): %w", role, err))
			}
		})
	}
	subConn, err := nats.Connect(url, nats.Name("ackflow-bench-raw-sub"), lost("subscriber"))
	if err != nil {
		return RawResult{}, fmt.Errorf("bench: connecting the raw NATS subscriber to %s: %w", url, err)
	}
	defer subConn.Close()
	pubConn, err := nats.Connect(url, nats.Name("ackflow-bench-raw-pub"), lost("publisher"))
	if err != nil {
		return RawResult{}, fmt.Errorf("bench: connecting the raw NATS publisher to %s: %w", url, err)
	}
	defer pubConn.Close()

	// A subject of its own lets runs share a server without counting each
	// other's messages.
	subject := "bench.raw." + rand.Text()
	want := int64(cfg.Messages)
	var received atomic.Int64
	var last time.Time // written once before done closes, read after
	done := make(chan struct{})
	sub, err := subConn.Subscribe(subject, func(*nats.Msg) {
		if received.Add(1) == want {
			last = time.Now()
			close(done)
		}
	})
	if err != nil {
		return RawResult{}, fmt.Errorf("bench: subscribing to %s: %w", subject, err)
	}
	// The default pending limits make the client drop messages when the
	// callback falls behind a publisher that never waits; the measure is of
	// delivery, so nothing may be dropped.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return RawResult{}, fmt.Errorf("bench: lifting the subscriber's pending limits: %w", err)
	}
	// The server must know the subscription before the first publish, or
	// the first messages go nowhere.
	if err := subConn.FlushWithContext(ctx); err != nil {
		return RawResult{}, fmt.Errorf("bench: registering the raw NATS subscription: %w", err)
	}

	payload := make([]byte, cfg.Size)
	start := time.Now()
	for i := range cfg.Messages {
		if err := pubConn.Publish(subject, payload); err != nil {
			return RawResult{}, fmt.Errorf("bench: publishing raw NATS message %d of %d: %w", i+1, cfg.Messages, err)
		}
		// Checking the context on every publish would show in the figure.
		if i&0xffff == 0 && ctx.Err() != nil {
			return RawResult{}, rawStopped(ctx, received.Load(), cfg.Messages)
		}
	}
	if err := pubConn.FlushWithContext(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return RawResult{}, fmt.Errorf("bench: flushing the raw NATS publisher: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return RawResult{}, rawStopped(ctx, received.Load(), cfg.Messages)
	}

	dropped, err := sub.Dropped()
	if err != nil {
		return RawResult{}, fmt.Errorf("bench: reading the subscriber's dropped count: %w", err)
	}
	elapsed := last.Sub(start)
	return RawResult{
		Messages:   cfg.Messages,
		Elapsed:    elapsed,
		MsgsPerSec: float64(cfg.Messages) / elapsed.Seconds(),
		Dropped:    dropped,
	}, nil
}

func rawStopped(ctx context.Context, arrived int64, sent int) error {
	return fmt.Errorf("bench: raw NATS run stopped with %d of %d messages arrived: %w", arrived, sent, context.Cause(ctx))
}
