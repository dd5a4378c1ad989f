// Command shapesworker is an ackflow worker binary, built with cli.Main
// as a user's own would be, whose one topology, shapes, puts side by side
// the shapes that found losses in local mode: an All grouping, a diamond
// of two groupings into one keyed bolt, a fan-out, and a bolt that fails
// its input after emitting half of its outputs. The end-to-end test
// TestClusterShapesSurviveSIGKILL runs it on worker processes and kills
// them; it is not meant to be run by hand, but can be:
//
//	go build -o /tmp/shapesworker ./e2e/shapesworker
//	/tmp/shapesworker nats &
//	/tmp/shapesworker worker --name w1 &
//	seq 0 999 > /tmp/numbers.txt; mkdir /tmp/updates
//	/tmp/shapesworker submit shapes --set input=/tmp/numbers.txt --set updates=/tmp/updates
//
// The input is a text file of one value per line. Every branch ends in a
// keyed count of the values (keyed state, restored from checkpoints), and
// every count update goes to one two-phase-commit file sink as a line
// BRANCH/VALUE<TAB>COUNT: each value is counted 3 times in branch all
// (three copies), 2 in diamond (two paths), fan-out times in fanned and
// 4 in quartered.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/ackflow/ackflow/cli"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
)

func main() { cli.Main(cli.Topologies{"shapes": build}) }

// build reads the settings input (the file), updates (the sink's
// directory, which must exist), rate (lines per second, default as fast
// as flow control allows) and fan-out (children per input in branch
// fanned, default 3).
func build(s cli.Settings) (*topology.Topology, error) {
	if err := s.Only("input", "updates", "rate", "fan-out"); err != nil {
		return nil, err
	}
	rate, err := s.Float("rate", 0)
	if err != nil {
		return nil, err
	}
	k, err := s.Int("fan-out", 3)
	if err != nil {
		return nil, err
	}
	input, updates := s.String("input", ""), s.String("updates", "")
	switch {
	case len(s) == 0:
		// A worker builds its topologies without settings for their
		// fingerprint, which is the shape alone.
	case input == "" || updates == "":
		return nil, errors.New("give the settings input (a file of one value per line) and updates (a directory)")
	default:
		if st, err := os.Stat(updates); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("setting updates=%s: not a directory this worker can see; create it first", updates)
		}
	}
	in := sources.FileConfig{Path: input, LinesPerSec: rate}
	if len(s) > 0 {
		if err := in.Validate(); err != nil {
			return nil, err
		}
	}
	b := topology.NewBuilder("shapes")
	b.Spout("numbers", func() topology.Spout { return sources.NewFile(in) }, 1).Outputs("n")
	// All: each of three copies is counted.
	b.BasicBolt("copy", pass(1), 3).Input("numbers", topology.All()).Outputs("n")
	counter(b, "all").Input("copy", topology.Fields("n"))
	// Diamond: two paths meet in one keyed count.
	b.BasicBolt("left", pass(1), 2).Input("numbers", topology.Shuffle()).Outputs("n")
	b.BasicBolt("right", pass(1), 2).Input("numbers", topology.LocalOrShuffle()).Outputs("n")
	counter(b, "diamond").Input("left", topology.Fields("n")).Input("right", topology.Fields("n"))
	// Fan-out: k children per input.
	b.BasicBolt("fan", pass(k), 2).Input("numbers", topology.Shuffle()).Outputs("n")
	counter(b, "fanned").Input("fan", topology.Fields("n"))
	// A failed partial emit: four children per input; an input whose
	// line ends in 0 fails after two of them the first time its task
	// sees it, and its replay emits all four.
	b.BasicBolt("partial", func() topology.BasicBolt { return &partial{seen: map[string]bool{}} }, 2).
		Input("numbers", topology.Fields("n")).Outputs("n")
	counter(b, "quartered").Input("partial", topology.Fields("n"))
	b.Bolt("updates", sinks.NewFile(sinks.FileConfig{Dir: updates, Name: "updates"}), 2).
		Input("all", topology.Fields("key")).Input("diamond", topology.Fields("key")).
		Input("fanned", topology.Fields("key")).Input("quartered", topology.Fields("key"))
	return b.Build()
}

// pass returns a bolt that emits its input's value k times.
func pass(k int) func() topology.BasicBolt {
	return func() topology.BasicBolt { return copier{k: k} }
}

type copier struct{ k int }

func (copier) Prepare(topology.TaskContext) error { return nil }
func (copier) Cleanup() error                     { return nil }
func (c copier) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	for range c.k {
		if err := out.Emit(topology.Values{in.Values[0]}); err != nil {
			return err
		}
	}
	return nil
}

// partial emits four children per input, but fails an input whose value
// ends in 0 after two of them the first time it sees it.
type partial struct{ seen map[string]bool }

func (*partial) Prepare(topology.TaskContext) error { return nil }
func (*partial) Cleanup() error                     { return nil }
func (p *partial) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	v, err := in.String(0)
	if err != nil {
		return err
	}
	failFirst := len(v) > 0 && v[len(v)-1] == '0' && !p.seen[v]
	p.seen[v] = true
	for i := range 4 {
		if failFirst && i == 2 {
			return fmt.Errorf("shapes: %s fails after two of its four outputs, once", v)
		}
		if err := out.Emit(topology.Values{v}); err != nil {
			return err
		}
	}
	return nil
}

// counter adds branch's keyed count: it counts each value in keyed state
// and emits (BRANCH/VALUE, count) for the sink.
func counter(b *topology.Builder, branch string) *topology.Component {
	return b.BasicBolt(branch, func() topology.BasicBolt { return &count{branch: branch} }, 2).
		KeyedState().Outputs("key", "count")
}

type count struct {
	branch string
	counts *topology.Counters
}

func (c *count) Prepare(tc topology.TaskContext) error {
	c.counts = tc.State.Counters("counts")
	return nil
}

func (c *count) Cleanup() error { return nil }

func (c *count) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	v, err := in.String(0)
	if err != nil {
		return err
	}
	return out.Emit(topology.Values{c.branch + "/" + v, c.counts.Add(v, 1)})
}
