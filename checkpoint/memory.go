package checkpoint

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// Memory is a Store in memory, for tests (this package's and users') and
// for runs that need no checkpoint to outlive the process.
type Memory struct {
	mu      sync.Mutex
	objects map[string][]byte
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{objects: map[string][]byte{}} }

// Put keeps a copy of data, so that a caller reusing its buffer does not
// change the stored object, as it would not change a file.
func (m *Memory) Put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[name] = slices.Clone(data)
	return nil
}

// Get returns a copy of the object.
func (m *Memory) Get(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objects[name]
	if !ok {
		return nil, notFound(name, "memory", nil)
	}
	return append([]byte{}, data...), nil
}

// List returns the names that start with prefix, sorted.
func (m *Memory) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for name := range m.objects {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Delete removes the object, if there is one.
func (m *Memory) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, name)
	return nil
}
