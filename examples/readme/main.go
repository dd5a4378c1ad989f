// Command readme is the topology shown in the README: three sentences,
// split into words, printed, at-least-once.
package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// sentences emits three lines, each with its position as message ID.
type sentences struct {
	next int
	out  topology.SpoutCollector
}

var text = []string{"the cat sat", "the dog sat", "the end"}

func (s *sentences) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	s.out = out
	return nil
}

func (s *sentences) Next(context.Context) error {
	if s.next == len(text) {
		return topology.ErrExhausted // a bounded source: the run ends when all is processed
	}
	s.out.Emit(topology.MsgID{Offset: int64(s.next)}, topology.Values{text[s.next]})
	s.next++
	return nil
}

func (s *sentences) Ack(topology.MsgID)  {}
func (s *sentences) Fail(topology.MsgID) {} // the runtime replays the record itself
func (s *sentences) Close() error        { return nil }

// split is a basic bolt: its emits are anchored to the input, and the
// runtime acks the input when Execute returns nil.
type split struct{}

func (split) Prepare(topology.TaskContext) error { return nil }
func (split) Cleanup() error                     { return nil }
func (split) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	line, err := in.StringByField("line")
	if err != nil {
		return err // fails the input: its tree is replayed
	}
	for _, w := range strings.Fields(line) {
		out.Emit(topology.Values{w})
	}
	return nil
}

type printer struct{}

func (printer) Prepare(topology.TaskContext) error { return nil }
func (printer) Cleanup() error                     { return nil }
func (printer) Execute(in *topology.Tuple, _ topology.BasicCollector) error {
	fmt.Println(in.Values...)
	return nil
}

func main() {
	b := topology.NewBuilder("demo")
	b.Spout("lines", func() topology.Spout { return &sentences{} }, 1).Outputs("line")
	b.BasicBolt("split", func() topology.BasicBolt { return split{} }, 2).
		Input("lines", topology.Shuffle()).Outputs("word")
	b.BasicBolt("print", func() topology.BasicBolt { return printer{} }, 2).
		Input("split", topology.Fields("word"))
	topo, err := b.Build() // validates: unknown components, cycles, undeclared fields...
	if err != nil {
		panic(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Guarantee = workers.AtLeastOnce
	sum, err := workers.RunLocal(context.Background(), topo, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d records, %.0f records/s\n", sum.Records, sum.RecordsPerSec)
}
