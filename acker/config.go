package acker

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by every error that Validate and New return.
var ErrInvalidConfig = errors.New("acker: invalid config")

// Config configures a Tracker. Start from DefaultConfig and change fields.
type Config struct {
	// Timeout is the message timeout: a tree that has not completed about
	// this long after its first message (or its last RESET) expires and fails.
	Timeout time.Duration
	// Buckets is the number of rotating buckets, at least 2. A tree expires
	// between Timeout and Timeout*Buckets/(Buckets-1) after it was last put in
	// the newest bucket. More buckets make expiry more precise but make every
	// message for a new tree check more maps.
	Buckets int
}

// DefaultConfig returns Storm's message timeout (30 s) with 3 buckets, so
// trees expire between 30 s and 45 s.
func DefaultConfig() Config {
	return Config{Timeout: 30 * time.Second, Buckets: 3}
}

// Validate reports the first field that New would refuse.
func (c Config) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("%w: Timeout must be positive, got %v; start from DefaultConfig() (30s) or use the topology's message timeout",
			ErrInvalidConfig, c.Timeout)
	}
	if c.Buckets < 2 {
		return fmt.Errorf("%w: Buckets must be at least 2, got %d; with one bucket a tree could expire at once (DefaultConfig uses 3)",
			ErrInvalidConfig, c.Buckets)
	}
	if c.rotateEvery() <= 0 {
		return fmt.Errorf("%w: Timeout %v is too short to split into %d rotations; raise Timeout or lower Buckets",
			ErrInvalidConfig, c.Timeout, c.Buckets-1)
	}
	return nil
}

func (c Config) rotateEvery() time.Duration {
	return c.Timeout / time.Duration(c.Buckets-1)
}
