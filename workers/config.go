package workers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/upstreambackup"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/term"
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
	// Workers is the number of worker nodes of a local run (each its own
	// NATS connection).
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
	// topology.max.spout.pending). A task lets between an eighth of it and
	// all of it be in flight: the pending window grows while it holds the
	// spout back and shrinks while it does not (docs/design-notes.md, "The
	// pending window").
	MaxSpoutPending int
	// MaxPendingBytes bounds the bytes of pending root records per spout task.
	MaxPendingBytes int64
	// MessageTimeout fails a tree that has not completed in this long.
	MessageTimeout time.Duration
	// HeartbeatEvery and DeadAfter drive failure detection of a local
	// run's nodes (their membership entries; cluster mode's are
	// NodeConfig.Members).
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
	// MaxAttempts is how many attempts of a root may fail in the topology
	// (a bolt failed it, or its tree timed out) before its spout gives up
	// and sends it to DeadLetters with the last error. Attempts cut short
	// by a worker's death do not count. 0 replays forever, as Storm does.
	// Spouts that replay themselves (topology.SelfReplaying) own their
	// retries.
	MaxAttempts int
	// ReplayBackoff delays the replay after a root's second counted
	// failure; the delay doubles with each further failure, up to
	// MaxReplayBackoff. The first replay is immediate.
	ReplayBackoff, MaxReplayBackoff time.Duration
	// DeadLetters receives the roots given up on. Nil keeps them in memory
	// and returns them in Summary.DeadLetters.
	DeadLetters deadletter.Sink
	// DeadLetterStream, when DeadLetters is nil, sends them to the
	// JetStream stream ackflow_<topology>_dlq (subject
	// ackflow.<topology>.dlq) on the run's NATS server; an embedded server
	// then runs with JetStream. Summary.DeadLetters reads them back.
	DeadLetterStream bool
	// RetransmitBytes is, per task that publishes to NATS, the largest the
	// ring of recent frames kept to answer a receiver that reports a lost
	// frame (at-least-once) may grow. The ring starts at 64 KiB and doubles
	// only while it would otherwise drop frames younger than 5 s, so a
	// task holds about what it publishes in 5 s, at most this.
	RetransmitBytes int64
	// LossGrace is how long a receiver waits for a missing frame (it may
	// only be reordered) before asking its sender to send it again. NATS
	// keeps the order of one connection's messages, so the default is
	// short (2 ms); raise it above the delays of a link that reorders, or
	// frames are sent twice (the receiver drops the second copy).
	LossGrace time.Duration
	// CheckpointEvery is the interval between checkpoints (DESIGN.md
	// section 8); 0 takes none, except that exactly-once takes one every
	// second. Every spout must implement topology.Positioned.
	CheckpointEvery time.Duration
	// CheckpointTimeout bounds how long the spouts stay paused waiting for
	// the trees in flight to complete; past it the checkpoint is abandoned
	// and the next interval tries again.
	CheckpointTimeout time.Duration
	// Checkpoints stores them; nil keeps them in memory, which survives
	// the loss of a worker in local mode but not of the process.
	Checkpoints checkpoint.Store
	// KeepCheckpoints is how many complete checkpoints are kept.
	KeepCheckpoints int
	// Resume starts from the latest complete checkpoint in Checkpoints
	// instead of from the beginning of the sources.
	Resume bool
	// NATSURL connects to an existing server instead of starting one
	// (several servers of a cluster: comma-separated URLs).
	NATSURL string
	// NATSOptions are added to every connection the runtime opens:
	// credentials, TLS. Tasks get them in TaskContext.NATSOptions.
	NATSOptions []nats.Option
	// Logger receives structured logs. DefaultConfig's writes warnings and
	// errors to stderr; zerolog.Nop() discards them.
	Logger zerolog.Logger
	// Metrics, if set, shows the run to Prometheus: its tasks' counters,
	// latency histograms and gauges, its checkpoints and its workers'
	// transport figures (package metrics, docs/metrics.md). Without it a
	// local run does not time executes (a cluster member always does, for
	// its status reports).
	Metrics *metrics.Registry
	// View, if set, shows a local run's workers and tasks while it runs
	// (the status page of ackflow run --ui); cluster mode ignores it.
	View *LocalView
	// Progress, if set, is called about every ProgressEvery with live figures.
	Progress      func(Progress)
	ProgressEvery time.Duration

	// assign places every task on a worker slot (cluster mode: the
	// generation's assignment); nil spreads them round-robin.
	assign []int
	// figures, in the nodes of an in-process cluster, collects what their
	// members and leaders did, for the run's summary.
	figures *figures
	// inCluster, if set, is given a local run's in-process cluster once
	// its nodes have joined (tests reach the nodes through it).
	inCluster func(*inCluster)
	// positions, in a cluster member, is where spouts over rewindable
	// sources without checkpoints write their positions (spoutPositions);
	// submitted names the submission they belong to.
	positions cluster.Positions
	submitted time.Time
}

// DefaultConfig is what `ackflow run` uses without flags.
func DefaultConfig() Config {
	return Config{
		Guarantee:         AtLeastOnce,
		Workers:           2,
		BatchSize:         512,
		Linger:            2 * time.Millisecond,
		QueueSize:         64,
		Ackers:            1,
		MaxSpoutPending:   4096,
		MaxPendingBytes:   64 << 20,
		MessageTimeout:    30 * time.Second,
		HeartbeatEvery:    100 * time.Millisecond,
		DeadAfter:         500 * time.Millisecond,
		ProgressEvery:     time.Second,
		Dedup:             dedup.DefaultConfig(),
		Log:               upstreambackup.DefaultConfig(),
		MaxAttempts:       10,
		ReplayBackoff:     100 * time.Millisecond,
		MaxReplayBackoff:  5 * time.Second,
		RetransmitBytes:   8 << 20,
		LossGrace:         2 * time.Millisecond,
		CheckpointTimeout: 5 * time.Second,
		KeepCheckpoints:   3,
		Logger:            DefaultLogger(zerolog.WarnLevel),
	}
}

// Validate reports the first setting that cannot work, with what to do.
func (c Config) Validate() error {
	switch {
	case c.Guarantee != AtMostOnce && c.Guarantee != AtLeastOnce && c.Guarantee != ExactlyOnce:
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
	switch {
	case c.MaxAttempts < 0:
		return fmt.Errorf("workers: max attempts %d must not be negative (0 replays forever)", c.MaxAttempts)
	case c.ReplayBackoff < 0 || c.MaxReplayBackoff < c.ReplayBackoff:
		return fmt.Errorf("workers: replay backoff %v..%v: both must be non-negative and the maximum at least the initial delay", c.ReplayBackoff, c.MaxReplayBackoff)
	case c.Guarantee != AtMostOnce && c.RetransmitBytes < 1<<20:
		return fmt.Errorf("workers: retransmit bytes %d is too small to answer lost-frame reports; use at least 1 MiB", c.RetransmitBytes)
	case c.Guarantee != AtMostOnce && (c.LossGrace <= 0 || c.LossGrace >= c.MessageTimeout):
		return fmt.Errorf("workers: loss grace %v must be positive and shorter than the message timeout (%v)", c.LossGrace, c.MessageTimeout)
	}
	for name, p := range c.Parallelism {
		if p < 1 {
			return fmt.Errorf("workers: parallelism %s=%d must be at least 1", name, p)
		}
	}
	if c.Chaos.CrashEvery > 0 && c.Workers < 2 && c.checkpointEvery() == 0 {
		return errors.New("workers: crash chaos without checkpoints needs at least 2 workers: one keeps the spouts and stateful bolts, the others are crashed")
	}
	switch {
	case c.CheckpointEvery < 0:
		return fmt.Errorf("workers: checkpoint interval %v must not be negative", c.CheckpointEvery)
	case c.Guarantee == AtMostOnce && c.CheckpointEvery > 0:
		return errors.New("workers: checkpoints need at-least-once or exactly-once: at-most-once has no acking to tell when a checkpoint is consistent")
	case c.Guarantee == ExactlyOnce && c.NoDedup:
		return errors.New("workers: exactly-once needs dedup; drop NoDedup")
	case c.checkpointEvery() > 0 && c.KeepCheckpoints < 1:
		return fmt.Errorf("workers: keep %d checkpoints; keep at least 1", c.KeepCheckpoints)
	case c.checkpointEvery() > 0 && c.CheckpointTimeout <= 0:
		return fmt.Errorf("workers: checkpoint timeout %v must be positive", c.CheckpointTimeout)
	case c.Resume && c.Checkpoints == nil:
		return errors.New("workers: Resume needs a checkpoint store that outlives the run (Checkpoints, --checkpoint-dir)")
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

// DefaultLogger writes human-readable lines to stderr when it is a
// terminal and JSON lines otherwise, at level and above.
func DefaultLogger(level zerolog.Level) zerolog.Logger { return NewLogger(os.Stderr, level) }

// NewLogger logs to w at level: readable console lines when w is a
// terminal, JSON lines otherwise (for journald, docker logs and log
// shippers).
func NewLogger(w io.Writer, level zerolog.Level) zerolog.Logger {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		w = zerolog.ConsoleWriter{Out: f, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// checkpointEvery is the effective checkpoint interval.
func (c Config) checkpointEvery() time.Duration {
	if c.CheckpointEvery == 0 && c.Guarantee == ExactlyOnce {
		return time.Second
	}
	return c.CheckpointEvery
}

// dedupOn reports whether stateful bolts suppress duplicates.
func (c Config) dedupOn() bool { return c.Guarantee != AtMostOnce && !c.NoDedup }
