package cluster

import (
	"context"
	"errors"
)

// bucket is the part of a JetStream key-value bucket that the primitives
// use. kvBucket is a real one; memBucket imitates one in memory, so that
// local mode runs the same code as a cluster.
type bucket interface {
	// where names the bucket in errors: "bucket ackflow_members", "memory".
	where() string
	// get returns the key's live entry, or errNoKey if it has none (never
	// written, deleted or expired).
	get(ctx context.Context, key string) (entry, error)
	// create writes the key if it has no live entry, else errKeyExists.
	create(ctx context.Context, key string, value []byte) (uint64, error)
	// update writes the key if its latest revision is rev, else
	// errRevMismatch. In a bucket with a TTL it renews the key.
	update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	// delete removes the key: only if its latest revision is rev
	// (errRevMismatch otherwise), or whatever it holds if rev is 0.
	delete(ctx context.Context, key string, rev uint64) error
	// list returns the live entries.
	list(ctx context.Context) ([]entry, error)
	// watch sends the live entries of key (of every key if key is ""),
	// then an event with initDone set, then every change. It closes the
	// channel when ctx ends or the watch breaks (the connection closed).
	watch(ctx context.Context, key string) (<-chan event, error)
}

// entry is a revision of a key.
type entry struct {
	key   string
	value []byte
	rev   uint64
}

// event is a change seen by a watch: a put, or the removal of the key
// (deleted, purged or expired), or the end of the initial entries.
type event struct {
	entry
	deleted  bool
	initDone bool
}

var (
	errNoKey       = errors.New("no such key")
	errKeyExists   = errors.New("key exists")
	errRevMismatch = errors.New("revision mismatch")
)

// relay turns a bucket's events into values for out, in order, and holds
// them in a queue meanwhile, so that reading the bucket's watch never waits
// for out's receiver (a blocked reader would stall the NATS subscription
// behind it). It closes out when ctx ends, or once the queue is empty after
// events closed.
func relay[T any](ctx context.Context, events <-chan event, out chan<- T, apply func(event) []T) {
	defer close(out)
	var queue []T
	for events != nil || len(queue) > 0 {
		var send chan<- T
		var head T
		if len(queue) > 0 {
			send, head = out, queue[0]
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			queue = append(queue, apply(ev)...)
		case send <- head:
			var zero T
			queue[0] = zero
			queue = queue[1:]
		}
	}
}
