package deadletter

import (
	"context"
	"errors"
)

// Sink stores dead letters. The spout tasks of one run share a sink, so
// implementations are safe for concurrent use.
type Sink interface {
	// Put stores l durably before it returns nil. A Put that returned an
	// error may be retried with the same letter.
	Put(ctx context.Context, l Letter) error
	// Close releases the sink; later Puts return ErrClosed. Closing twice is
	// harmless, so a deferred Close may follow an explicit one.
	Close() error
}

// ErrClosed is returned by Put on a closed sink.
var ErrClosed = errors.New("deadletter: Put after Close; the letter is not stored: close the sink only after every spout task has stopped")
