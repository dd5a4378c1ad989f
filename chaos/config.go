package chaos

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config says how often each failure happens. The zero value injects nothing.
type Config struct {
	Drop       float64       // probability that a frame is lost
	Dup        float64       // probability that a frame is delivered twice
	Reorder    float64       // probability that a frame is held back and sent after the next one
	Delay      time.Duration // upper bound of a random delay added to a frame (0: none)
	DelayProb  float64       // probability that a frame is delayed (default 1 when Delay > 0)
	Fail       float64       // probability that a bolt fails an input before running user code (a transient error)
	CrashEvery time.Duration // crash a worker this often (0: never)
	Seed       uint64        // seed of every generator
}

// Enabled reports whether any frame-level failure is configured.
func (c Config) Enabled() bool {
	return c.Drop > 0 || c.Dup > 0 || c.Reorder > 0 || c.Delay > 0
}

// Any reports whether any failure at all is configured.
func (c Config) Any() bool { return c.Enabled() || c.Fail > 0 || c.CrashEvery > 0 }

// Validate checks ranges.
func (c Config) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"drop", c.Drop}, {"dup", c.Dup}, {"reorder", c.Reorder}, {"delay-prob", c.DelayProb}, {"fail", c.Fail}} {
		if p.v < 0 || p.v > 1 {
			return fmt.Errorf("chaos: %s=%v is not a probability between 0 and 1", p.name, p.v)
		}
	}
	if c.Delay < 0 || c.CrashEvery < 0 {
		return fmt.Errorf("chaos: delay and crash-every must not be negative")
	}
	if c.CrashEvery > 0 && c.CrashEvery < 100*time.Millisecond {
		return fmt.Errorf("chaos: crash-every=%v is shorter than failure detection; use 100ms or more", c.CrashEvery)
	}
	return nil
}

// String renders the config in the syntax Parse reads.
func (c Config) String() string {
	var parts []string
	add := func(k string, v float64) {
		if v > 0 {
			parts = append(parts, k+"="+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	add("drop", c.Drop)
	add("dup", c.Dup)
	add("reorder", c.Reorder)
	add("fail", c.Fail)
	if c.Delay > 0 {
		parts = append(parts, "delay="+c.Delay.String())
	}
	if c.CrashEvery > 0 {
		parts = append(parts, "crash-every="+c.CrashEvery.String())
	}
	parts = append(parts, "seed="+strconv.FormatUint(c.Seed, 10))
	return strings.Join(parts, ",")
}

// Parse reads "drop=0.05,dup=0.01,reorder=0.1,delay=2ms,fail=0.01,crash-every=3s,seed=7".
// Unknown keys and bad values are errors that name the key.
func Parse(s string) (Config, error) {
	var c Config
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return c, fmt.Errorf("chaos: %q is not key=value (keys: drop, dup, reorder, delay, delay-prob, fail, crash-every, seed)", kv)
		}
		var err error
		switch k {
		case "drop":
			c.Drop, err = strconv.ParseFloat(v, 64)
		case "dup":
			c.Dup, err = strconv.ParseFloat(v, 64)
		case "reorder":
			c.Reorder, err = strconv.ParseFloat(v, 64)
		case "fail":
			c.Fail, err = strconv.ParseFloat(v, 64)
		case "delay-prob":
			c.DelayProb, err = strconv.ParseFloat(v, 64)
		case "delay":
			c.Delay, err = time.ParseDuration(v)
		case "crash-every":
			c.CrashEvery, err = time.ParseDuration(v)
		case "seed":
			c.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return c, fmt.Errorf("chaos: unknown key %q (keys: drop, dup, reorder, delay, delay-prob, fail, crash-every, seed)", k)
		}
		if err != nil {
			return c, fmt.Errorf("chaos: bad value for %s: %w", k, err)
		}
	}
	if c.Delay > 0 && c.DelayProb == 0 {
		c.DelayProb = 1
	}
	return c, c.Validate()
}
