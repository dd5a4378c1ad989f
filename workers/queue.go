package workers

import (
	"sync"

	"github.com/ackflow/ackflow/wire"
)

// mailbox is a task's control path: acker messages, notices and link
// frames (a *wire.Frame mailbox), and death notices for spouts. Putting
// never blocks and never drops (DESIGN.md: control messages are never
// dropped because queues are full): a full bounded channel would have to do
// one or the other, and blocking can deadlock an acker and a spout that
// send to each other in one worker. The mailbox is bounded instead by flow
// control: every control frame follows from records in flight, which the
// spouts bound, and a worker whose mailbox grows past its high-water mark
// signals backpressure (Worker.congested).
//
// Many goroutines put (NATS callbacks, local senders); only the task's
// goroutine drains.
type mailbox[T any] struct {
	mu    sync.Mutex
	items []T
	spare []T           // the drained slice, reused for the next puts
	ready chan struct{} // has a value while items may be waiting
}

// ctrlQueue is the mailbox of control frames.
type ctrlQueue = mailbox[*wire.Frame]

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{ready: make(chan struct{}, 1)} }

func newCtrlQueue() *ctrlQueue { return newMailbox[*wire.Frame]() }

func (q *mailbox[T]) push(item T) {
	q.mu.Lock()
	q.items = append(q.items, item)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// drain hands every waiting item to fn, in arrival order.
func (q *mailbox[T]) drain(fn func(T)) {
	q.mu.Lock()
	items := q.items
	q.items, q.spare = q.spare[:0], nil
	q.mu.Unlock()
	var zero T
	for i, item := range items {
		fn(item)
		items[i] = zero
	}
	q.mu.Lock()
	if q.spare == nil && cap(items) <= 4096 {
		q.spare = items[:0]
	}
	q.mu.Unlock()
}

func (q *mailbox[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}
