package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Memory is a Sink that keeps letters in memory, for tests and for runs
// that report dead letters only at the end.
type Memory struct {
	mu      sync.Mutex
	letters []Letter
	closed  bool
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{} }

// Put keeps l as the durable sinks would read it back (through JSON), so
// tests see the same Unsupported values and no aliasing of the caller's
// Values. It does not look at ctx: nothing here blocks, and refusing a
// letter during shutdown would lose it.
func (m *Memory) Put(_ context.Context, l Letter) error {
	b, err := encode(l)
	if err != nil {
		return err
	}
	var stored Letter
	if err := json.Unmarshal(b, &stored); err != nil {
		return fmt.Errorf("deadletter: the letter of record %016x does not read back, which is a bug in package deadletter: %w", l.RecordID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.letters = append(m.letters, stored)
	return nil
}

// Close makes later Puts fail; the letters stay readable.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Letters returns a copy of the letters in the order they were put.
func (m *Memory) Letters() []Letter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Letter(nil), m.letters...)
}

// Len is the number of letters put.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.letters)
}
