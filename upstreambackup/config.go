package upstreambackup

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every error that Validate and New return.
var ErrInvalidConfig = errors.New("upstreambackup: invalid config")

// Config bounds a Log. Start from DefaultConfig and change fields.
type Config struct {
	// MaxEntries bounds the number of inputs logged. Together with the
	// per-entry overhead (BenchmarkMemoryPerEntry) it bounds the log's own
	// memory, which MaxBytes does not count.
	MaxEntries int
	// MaxBytes bounds the sum of the sizes callers passed to Append: the
	// bytes of the logged outputs as the caller estimates them.
	MaxBytes int64
}

// DefaultConfig returns 1<<18 entries and 64 MiB of outputs. At 255 bytes
// of overhead per entry (BenchmarkMemoryPerEntry) the log's own memory is
// then about 64 MiB on top of MaxBytes, and 262 144 inputs leave room for
// thousands of pending trees times their fan-out through one task.
func DefaultConfig() Config {
	return Config{MaxEntries: 1 << 18, MaxBytes: 64 << 20}
}

// Validate reports the first field that New would refuse.
func (c Config) Validate() error {
	if c.MaxEntries <= 0 {
		return fmt.Errorf("%w: MaxEntries must be positive, got %d; start from DefaultConfig() (%d)",
			ErrInvalidConfig, c.MaxEntries, DefaultConfig().MaxEntries)
	}
	if c.MaxBytes <= 0 {
		return fmt.Errorf("%w: MaxBytes must be positive, got %d; start from DefaultConfig() (%d)",
			ErrInvalidConfig, c.MaxBytes, DefaultConfig().MaxBytes)
	}
	return nil
}
