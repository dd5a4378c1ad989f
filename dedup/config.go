package dedup

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by every error that Validate and New return.
var ErrInvalidConfig = errors.New("dedup: invalid config")

// Config sizes a Filter. Start from DefaultConfig and change fields.
type Config struct {
	// Window is how many recent IDs the Bloom generations are sure to
	// remember: a replay that arrives within Window checks of the original
	// reaches the exact confirmation. It must exceed the number of inputs a
	// task holds in its output log, or a replay of a logged input can find
	// the Bloom filter has already forgotten it.
	Window int
	// FPRate is the target false-positive rate of the whole filter, all
	// generations together: the fraction of never-seen IDs that come back
	// Suspect and cost an exact lookup. Each generation gets FPRate/Generations.
	FPRate float64
	// Generations is the number of rotating Bloom filters, at least 2. The
	// newest takes adds; when it holds Window/(Generations-1) IDs (rounded
	// up) the oldest is cleared and becomes the new newest. More generations
	// make the window more precise (it covers between Window and
	// Window*Generations/(Generations-1) IDs) but split FPRate further and
	// share a unit between more of them: an ID's bits in every generation
	// lie in one unit of G pieces of 8/G words each (at least one word), one
	// cache line for 2, 4 or 8 generations, and smaller pieces need more
	// bits per ID for the same rate. Four take the fewest bits per ID at
	// the default's rate.
	Generations int
	// Exact is how many recent completions the Filter is sure to remember
	// exactly, the record that outlives the caller's log. A replay of an ID
	// whose log entry was trimmed is confirmed while the ID is among the
	// last Exact completions, and never once it is older than the last
	// B*ceil(Exact/(B-1)), B = min(16, Exact+1): about Exact*16/15 for a
	// large Exact. The completions are kept in B blocks that rotate like
	// the Bloom generations (see the package doc), at about 16*B/(B-1)
	// bytes per Exact: 17 once Exact reaches 15.
	Exact int
}

// DefaultConfig returns a window of 1<<20 IDs in 4 generations at a 0.085%
// false-positive rate (about 0.07% measured, as the 3 generations of earlier
// releases measured), which costs about 35.5 bits per ID (4.7 MB in all), and
// an exact record of the last 1<<20 completions (18 MB: 16 blocks of 1.1 MB).
// The exact record must cover the time in which a stale copy of a record can
// still arrive after a newer attempt of its tree completed (a copy queued
// behind a backlog when its tree timed out): word count under heavy chaos
// showed duplicates escaping a ring of 1<<16, which at full speed covers
// only a second or two.
func DefaultConfig() Config {
	return Config{Window: 1 << 20, FPRate: 0.00085, Generations: 4, Exact: 1 << 20}
}

// Validate reports the first field that New would refuse.
func (c Config) Validate() error {
	def := DefaultConfig()
	switch {
	case c.Window <= 0:
		return fmt.Errorf("%w: Window must be positive, got %d; start from DefaultConfig() (%d) or set it above the number of inputs a log holds",
			ErrInvalidConfig, c.Window, def.Window)
	case !(c.FPRate > 0 && c.FPRate < 1): // also refuses NaN
		return fmt.Errorf("%w: FPRate must be between 0 and 1 (exclusive), got %v; DefaultConfig() uses %v",
			ErrInvalidConfig, c.FPRate, def.FPRate)
	case c.Generations < 2:
		return fmt.Errorf("%w: Generations must be at least 2, got %d; with one generation a rotation would forget the whole window at once (DefaultConfig() uses %d)",
			ErrInvalidConfig, c.Generations, def.Generations)
	case c.Window < c.Generations-1:
		return fmt.Errorf("%w: Window (%d) must be at least Generations-1 (%d) so that each generation holds at least one ID; raise Window or lower Generations",
			ErrInvalidConfig, c.Window, c.Generations-1)
	case c.Exact <= 0:
		return fmt.Errorf("%w: Exact must be positive, got %d; start from DefaultConfig() (%d)",
			ErrInvalidConfig, c.Exact, def.Exact)
	}
	return nil
}

// perGeneration is how many IDs the newest generation takes before it
// rotates. Rounding up keeps the promise that the last Window IDs are
// remembered: right after a rotation the Generations-1 full generations hold
// (Generations-1)*perGeneration >= Window IDs.
func (c Config) perGeneration() int {
	g := c.Generations - 1
	return (c.Window + g - 1) / g
}

// maxExactBlocks is B for any Exact of at least 15. Each block holds about
// Exact/15 IDs: 1.1 MB for the default. More blocks would make the bound
// tighter, but a lookup that misses scans the ID's bucket in every block.
const maxExactBlocks = 16

// exactBlocks is how the exact record of completions is cut: into blocks
// blocks, each taking perBlock completions before the oldest is cleared for
// the next. Rounding perBlock up keeps the promise that the last Exact
// completions are remembered: right after a rotation the blocks-1 full
// blocks hold (blocks-1)*perBlock >= Exact of them. A small Exact gets
// fewer blocks rather than blocks of zero.
func (c Config) exactBlocks() (blocks, perBlock int) {
	blocks = min(maxExactBlocks-1, c.Exact) + 1 // Exact+1 could overflow
	g := blocks - 1
	return blocks, (c.Exact + g - 1) / g
}
