package sinks

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishAsync publishes msg to a stream asynchronously, as a program
// that fills a topology's input stream does, waiting while js already has
// its maximum of unacknowledged publishes out: the client gives such a
// wait up after 200 ms (jetstream.ErrTooManyStalledMsgs), and a busy
// server is no reason to stop feeding it. It returns when the message is
// handed to the client, with its future, or when ctx ends. The JetStream
// sinks do not use it: a sink fails the record instead, and its replay
// retries.
func PublishAsync(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	for {
		f, err := js.PublishMsgAsync(msg, opts...)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
	}
}
