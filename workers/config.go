package workers

import (
	"errors"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/upstreambackup"
	"github.com/rs/zerolog"
)

// Guarantee is a topology's processing guarantee (DESIGN.md section 1).
type Guarantee int

const (
	AtMostOnce Guarantee = iota
	AtLeastOnce
	ExactlyOnce
)

func (g Guarantee) String() string {
	switch g {
	case AtMostOnce:
		return "at-most-once"
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return fmt.Sprintf("Guarantee(%d)", int(g))
}

// ErrNotAvailable is returned for a guarantee this build cannot give yet.
var ErrNotAvailable = errors.New("workers: guarantee not available")

// ParseGuarantee reads at-most-once, at-least-once or exactly-once.
func ParseGuarantee(s string) (Guarantee, error) {
	switch s {
	case "at-most-once":
		return AtMostOnce, nil
	case "at-least-once":
		return AtLeastOnce, nil
	case "exactly-once":
		return ExactlyOnce, nil
	}
	return 0, fmt.Errorf("workers: unknown guarantee %q; use at-most-once, at-least-once or exactly-once", s)
}

// Config tunes a run. Start from DefaultConfig.
type Config struct {
	Guarantee Guarantee
	// Workers is the number of logical workers (each its own NATS connection).
	Workers int
	// Parallelism overrides components' parallelism by name.
	Parallelism map[string]int
	// BatchSize is the most records one frame carries.
	BatchSize int
	// Linger is how long a partly filled batch may wait for more records.
	Linger time.Duration
	// QueueSize is the bound of a task's inbox, in batches.
	QueueSize int
	// Ackers is the number of acker tasks (at-least-once).
	Ackers int
	// MaxSpoutPending bounds the trees in flight per spout task (Storm's
	// topology.max.spout.pending).
	MaxSpoutPending int
	// MaxPendingBytes bounds the bytes of pending root records per spout task.
	MaxPendingBytes int64
	// MessageTimeout fails a tree that has not completed in this long.
	MessageTimeout time.Duration
	// HeartbeatEvery and DeadAfter drive failure detection of workers.
	HeartbeatEvery time.Duration
	DeadAfter      time.Duration
	// NoDedup turns off duplicate suppression in stateful bolts, which is
	// on by default for at-least-once (DESIGN.md section 6).
	NoDedup bool
	// Dedup sizes each stateful task's filter: the window of IDs its Bloom
	// generations cover, their target false-positive rate, and the ring of
	// recently completed IDs that confirms a "maybe".
	Dedup dedup.Config
	// Log bounds each stateful task's output log; a full log pushes back
	// on the spouts.
	Log upstreambackup.Config
	// Chaos injects failures (zero: none).
	Chaos chaos.Config
	// ChaosComponents limits frame-level chaos to frames sent by these
	// components (empty: every task, ackers included).
	ChaosComponents []string
	// NATSURL connects to an existing server instead of starting one.
	NATSURL string
	// Logger receives structured logs (zero value: discard).
	Logger zerolog.Logger
	// Progress, if set, is called about every ProgressEvery with live figures.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// DefaultConfig is what `ackflow run` uses without flags.
func DefaultConfig() Config {
	return Config{
		Guarantee:       AtMostOnce,
		Workers:         2,
		BatchSize:       512,
		Linger:          2 * time.Millisecond,
		QueueSize:       64,
		Ackers:          1,
		MaxSpoutPending: 4096,
		MaxPendingBytes: 64 << 20,
		MessageTimeout:  30 * time.Second,
		HeartbeatEvery:  100 * time.Millisecond,
		DeadAfter:       500 * time.Millisecond,
		ProgressEvery:   time.Second,
		Dedup:           dedup.DefaultConfig(),
		Log:             upstreambackup.DefaultConfig(),
		Logger:          zerolog.Nop(),
	}
}

// Validate reports the first setting that cannot work, with what to do.
func (c Config) Validate() error {
	switch {
	case c.Guarantee == ExactlyOnce:
		return fmt.Errorf("%w: exactly-once needs checkpoints, which this build does not have yet; use at-least-once", ErrNotAvailable)
	case c.Guarantee != AtMostOnce && c.Guarantee != AtLeastOnce:
		return fmt.Errorf("workers: unknown guarantee %d", int(c.Guarantee))
	case c.Workers < 1 || c.Workers > 64:
		return fmt.Errorf("workers: %d workers; use 1 to 64", c.Workers)
	case c.BatchSize < 1:
		return fmt.Errorf("workers: batch size %d must be at least 1", c.BatchSize)
	case c.Linger <= 0:
		return fmt.Errorf("workers: linger %v must be positive", c.Linger)
	case c.QueueSize < 2:
		return fmt.Errorf("workers: queue size %d must be at least 2", c.QueueSize)
	case c.Ackers < 1:
		return fmt.Errorf("workers: %d ackers; at-least-once needs at least 1", c.Ackers)
	case c.MaxSpoutPending < 1:
		return fmt.Errorf("workers: max spout pending %d must be at least 1", c.MaxSpoutPending)
	case c.MaxPendingBytes < 1:
		return fmt.Errorf("workers: max pending bytes %d must be at least 1", c.MaxPendingBytes)
	case c.MessageTimeout < 100*time.Millisecond:
		return fmt.Errorf("workers: message timeout %v is too short; use 100ms or more", c.MessageTimeout)
	case c.HeartbeatEvery <= 0 || c.DeadAfter < 2*c.HeartbeatEvery:
		return fmt.Errorf("workers: dead-after (%v) must be at least twice the heartbeat interval (%v)", c.DeadAfter, c.HeartbeatEvery)
	}
	for name, p := range c.Parallelism {
		if p < 1 {
			return fmt.Errorf("workers: parallelism %s=%d must be at least 1", name, p)
		}
	}
	if c.Chaos.CrashEvery > 0 && c.Workers < 2 {
		return errors.New("workers: crash chaos needs at least 2 workers: one keeps the spouts and stateful bolts, the others are crashed")
	}
	if c.Guarantee != AtMostOnce && !c.NoDedup {
		if err := c.Dedup.Validate(); err != nil {
			return err
		}
		if err := c.Log.Validate(); err != nil {
			return err
		}
	}
	return c.Chaos.Validate()
}

// dedupOn reports whether stateful bolts suppress duplicates.
func (c Config) dedupOn() bool { return c.Guarantee != AtMostOnce && !c.NoDedup }
