package bench

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
)

// Part is one share of the CPU time of a word count run: where the time
// per record goes.
type Part struct {
	Name string `json:"name"`
	// Share is the part's fraction of all CPU samples of the run.
	Share float64 `json:"share"`
	// NsPerRecord is the part's CPU time divided by the records the run
	// moved (lines and words), on all cores together.
	NsPerRecord float64 `json:"ns_per_record"`
}

// Breakdown is the CPU profile of one at-least-once word count with dedup
// on (the default), cut into parts.
type Breakdown struct {
	Records     int64   `json:"records"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	NsPerRecord float64 `json:"ns_per_record"`
	Parts       []Part  `json:"parts"`
}

// parts maps a function name to its part. A sample goes to the part of
// the innermost frame that has one, so that an allocation or a map lookup
// counts for the code that made it; samples with no such frame (the
// collector's background marking, the scheduler) are "Go runtime". The
// order matters: the first rule that matches a frame wins.
var parts = []struct {
	name     string
	prefixes []string
}{
	{"user code (split, count)", []string{"github.com/ackflow/ackflow/examples/wordcount."}},
	{"dedup (Bloom filter, exact ring)", []string{"github.com/ackflow/ackflow/dedup.", "github.com/ackflow/ackflow/workers.(*boltExec).dispatch", "github.com/ackflow/ackflow/workers.(*boltExec).reemit", "github.com/ackflow/ackflow/workers.(*boltExec).prefetch"}},
	{"acking (anchors, acker, completion)", []string{"github.com/ackflow/ackflow/acker.", "github.com/ackflow/ackflow/workers.(*boltExec).Ack", "github.com/ackflow/ackflow/workers.(*boltExec).anchorChild",
		"github.com/ackflow/ackflow/workers.(*ackerExec)", "github.com/ackflow/ackflow/workers.(*spoutExec).complete", "github.com/ackflow/ackflow/workers.(*outbox).addAck", "github.com/ackflow/ackflow/workers.(*outbox).flushAcks"}},
	{"output log (upstream backup)", []string{"github.com/ackflow/ackflow/upstreambackup."}},
	{"codec (frames)", []string{"github.com/ackflow/ackflow/wire."}},
	{"keyed state (counters by key group)", []string{"github.com/ackflow/ackflow/topology.(*Counters)", "github.com/ackflow/ackflow/topology.(*State)", "github.com/ackflow/ackflow/topology.KeyGroup", "github.com/ackflow/ackflow/topology.inline"}},
	{"routing, value checks and batching", []string{"github.com/ackflow/ackflow/workers.targets", "github.com/ackflow/ackflow/workers.pick", "github.com/ackflow/ackflow/workers.(*outbox)", "github.com/ackflow/ackflow/topology.Hash",
		"github.com/ackflow/ackflow/topology.ChildID", "github.com/ackflow/ackflow/topology.mix", "github.com/ackflow/ackflow/workers.(*boltExec).emit", "github.com/ackflow/ackflow/workers.(*base).check",
		"github.com/ackflow/ackflow/topology.NormalizeValues", "github.com/ackflow/ackflow/topology.normalize"}},
	{"NATS client", []string{"github.com/nats-io/nats.go"}},
	{"NATS server (embedded)", []string{"github.com/nats-io/nats-server"}},
	{"spout (reading the input)", []string{"github.com/ackflow/ackflow/sources.", "github.com/ackflow/ackflow/workers.(*spoutExec)"}},
	{"rest of the runtime (queues, tasks, metrics)", []string{"github.com/ackflow/ackflow/"}},
}

const goRuntime = "Go runtime (GC, scheduler, syscalls)"

// partOf returns the part of a sample's stack, innermost frame first.
// The profiler writes a dot in a package path's last element as %2e
// (github.com/nats-io/nats%2ego): it is matched as the dot it stands for.
func partOf(stack []string) string {
	for _, fn := range stack {
		fn = strings.ReplaceAll(fn, "%2e", ".")
		for _, p := range parts {
			for _, pre := range p.prefixes {
				if strings.HasPrefix(fn, pre) {
					return p.name
				}
			}
		}
	}
	return goRuntime
}

// breakdown runs the dedup word count again under the CPU profiler and
// cuts the profile into parts. The profile covers the whole process, so
// the embedded NATS server is in it too, as it is in every row's time.
func (s *suite) breakdown(ctx context.Context) error {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		// Another profile runs (go test -cpuprofile): leave the part out.
		s.rep.Unavailable = append(s.rep.Unavailable, "CPU breakdown: "+err.Error())
		return nil
	}
	// The profiler samples 100 times a second: runs are repeated until
	// there are a few hundred samples.
	wall := 3 * time.Second
	if s.cfg.Quick {
		wall = 1500 * time.Millisecond
	}
	var records int64
	for start := time.Now(); time.Since(start) < wall; {
		sum, lostWords, err := s.wordCount(ctx, wordcount.Config{}, func(c *workers.Config) { c.Guarantee = workers.AtLeastOnce })
		if err == nil && lostWords > 0 {
			err = fmt.Errorf("lost %d words", lostWords)
		}
		if err != nil {
			pprof.StopCPUProfile()
			return fmt.Errorf("bench: profiled word count: %w", err)
		}
		records += sum.Records
	}
	pprof.StopCPUProfile()
	prof, err := profile.Parse(&buf)
	if err != nil {
		return fmt.Errorf("bench: reading the CPU profile: %w", err)
	}
	b, err := cut(prof, records)
	if err != nil {
		return err
	}
	s.rep.Breakdown = b
	s.logf("breakdown: %.0f ns of CPU per record over %d records", b.NsPerRecord, b.Records)
	return nil
}

// cut sums a CPU profile's samples by part.
func cut(prof *profile.Profile, records int64) (Breakdown, error) {
	cpu := -1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return Breakdown{}, fmt.Errorf("bench: the profile has no cpu/nanoseconds samples")
	}
	if records <= 0 {
		return Breakdown{}, fmt.Errorf("bench: the profiled run moved no records")
	}
	byPart := map[string]int64{}
	var total int64
	var stack []string
	for _, smp := range prof.Sample {
		stack = stack[:0]
		for _, loc := range smp.Location {
			// Inlined functions come first in a location's lines.
			for _, ln := range loc.Line {
				if ln.Function != nil {
					stack = append(stack, ln.Function.Name)
				}
			}
		}
		v := smp.Value[cpu]
		byPart[partOf(stack)] += v
		total += v
	}
	if total <= 0 {
		return Breakdown{}, fmt.Errorf("bench: the profile holds no CPU time")
	}
	b := Breakdown{Records: records, CPUSeconds: float64(total) / 1e9, NsPerRecord: float64(total) / float64(records)}
	for name, v := range byPart {
		b.Parts = append(b.Parts, Part{Name: name, Share: float64(v) / float64(total), NsPerRecord: float64(v) / float64(records)})
	}
	sort.Slice(b.Parts, func(i, j int) bool { return b.Parts[i].Share > b.Parts[j].Share })
	return b, nil
}
