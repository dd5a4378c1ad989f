package cli

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go/jetstream"
)

// Settings are a submitted topology's --set key=value pairs, which its
// Build reads. Every worker builds the topology from the same settings.
type Settings map[string]string

// Build builds a topology from its settings. It must refuse settings it
// does not know (Settings.Only) and must build the same topology in every
// worker for the same settings.
type Build func(Settings) (*topology.Topology, error)

// Topologies are the topologies a worker binary can run, by name.
type Topologies map[string]Build

// Names returns the names, sorted.
func (t Topologies) Names() []string { return slices.Sorted(maps.Keys(t)) }

// Only refuses any key but these, naming the ones it knows.
func (s Settings) Only(keys ...string) error {
	for k := range s {
		if !slices.Contains(keys, k) {
			if len(keys) == 0 {
				return fmt.Errorf("unknown setting %q: this topology takes none", k)
			}
			return fmt.Errorf("unknown setting %q; this topology takes %s", k, strings.Join(keys, ", "))
		}
	}
	return nil
}

// String returns the setting, or def if it is not set.
func (s Settings) String(key, def string) string {
	if v, ok := s[key]; ok {
		return v
	}
	return def
}

// Float returns the setting as a number, or def if it is not set.
func (s Settings) Float(key string, def float64) (float64, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("setting %s=%q: not a number", key, v)
	}
	return f, nil
}

// Int returns the setting as an integer, or def if it is not set.
func (s Settings) Int(key string, def int) (int, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("setting %s=%q: not an integer", key, v)
	}
	return n, nil
}

// Duration returns the setting as a duration ("1.5s"), or def.
func (s Settings) Duration(key string, def time.Duration) (time.Duration, error) {
	v, ok := s[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("setting %s=%q: not a duration such as 1.5s", key, v)
	}
	return d, nil
}

// parseSettings reads --set key=value flags.
func parseSettings(pairs []string) (Settings, error) {
	s := Settings{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: use key=value", p)
		}
		if _, dup := s[k]; dup {
			return nil, fmt.Errorf("--set %s given twice", k)
		}
		s[k] = v
	}
	return s, nil
}

// Bundled returns the topologies the ackflow binary runs in cluster mode.
//
// wordcount counts the words of a text file (input=PATH, every worker must
// see the same file; default the bundled text) or of the messages of a
// JetStream stream (in-stream=NAME: each message a line; the run ends at
// the last message that was there when it started), reading rate lines per
// second (default: as fast as flow control allows). Every count update,
// (word, count), goes with out=SUBJECT to a JetStream stream that captures
// SUBJECT (exactly once by Nats-Msg-Id under exactly-once), and with
// updates=DIR through the two-phase-commit file sink into DIR (exactly once
// under exactly-once; DIR must be shared by the workers).
func Bundled() Topologies {
	return Topologies{"wordcount": buildWordCount}
}

func buildWordCount(s Settings) (*topology.Topology, error) {
	if err := s.Only("input", "in-stream", "rate", "updates", "out"); err != nil {
		return nil, err
	}
	rate, err := s.Float("rate", 0)
	if err != nil {
		return nil, err
	}
	cfg := wordcount.Config{Input: s.String("input", ""), LinesPerSec: rate}
	if stream := s.String("in-stream", ""); stream != "" {
		if cfg.Input != "" {
			return nil, errors.New("give the setting input or in-stream, not both")
		}
		in := sources.JetStreamConfig{Stream: stream, StopAtEnd: true, MessagesPerSec: rate,
			Decode: func(m jetstream.Msg) (topology.Values, error) { return topology.Values{string(m.Data())}, nil }}
		if err := in.Validate(); err != nil {
			return nil, err
		}
		cfg.Source = func() topology.Spout { return sources.NewJetStream(in) }
	}
	if subject := s.String("out", ""); subject != "" {
		if s.String("updates", "") != "" {
			return nil, errors.New("give the setting updates or out, not both")
		}
		cfg.Updates = sinks.NewJetStream(sinks.JetStreamConfig{Subject: subject})
	}
	if dir := s.String("updates", ""); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("setting updates=%s: not a directory this worker can see; create it first", dir)
		}
		cfg.Updates = sinks.NewFile(sinks.FileConfig{Dir: dir, Name: "updates"})
	}
	job, err := wordcount.New(cfg)
	if err != nil {
		return nil, err
	}
	return job.Topology, nil
}
