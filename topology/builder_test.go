package topology

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type nopSpout struct{}

func (nopSpout) Open(TaskContext, SpoutCollector) error { return nil }
func (nopSpout) Next(context.Context) error             { return ErrExhausted }
func (nopSpout) Ack(MsgID)                              {}
func (nopSpout) Fail(MsgID)                             {}
func (nopSpout) Close() error                           { return nil }

type nopBolt struct{}

func (nopBolt) Prepare(TaskContext, Collector) error { return nil }
func (nopBolt) Execute(*Tuple)                       {}
func (nopBolt) Cleanup() error                       { return nil }

func spout() Spout { return nopSpout{} }
func bolt() Bolt   { return nopBolt{} }

func TestBuildValidation(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *Builder)
		want  []string // substrings of the error; none means valid
	}{
		{"valid chain", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("line")
			b.Bolt("a", bolt, 2).Input("s", Shuffle()).Outputs("word")
			b.Bolt("c", bolt, 2).Input("a", Fields("word"))
		}, nil},
		{"valid named streams and every grouping", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x").Stream("errors", "msg").Stream("direct", "y")
			b.Bolt("a", bolt, 1).Input("s", All()).InputStream("s", "errors", Global())
			b.Bolt("b", bolt, 1).InputStream("s", "direct", Direct())
			b.Bolt("c", bolt, 1).Input("s", LocalOrShuffle())
			b.Bolt("d", bolt, 2).InputStream("s", "direct", Direct())
		}, nil},
		{"inputs reused by a spout", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x").ReuseInputs()
			b.Bolt("a", bolt, 1).Input("s", Shuffle()).ReuseInputs()
		}, []string{`spout "s" has no inputs to reuse`}},
		{"zero-copy inputs of a spout", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x").ZeroCopyInputs()
			b.Bolt("a", bolt, 1).Input("s", Shuffle()).ZeroCopyInputs()
		}, []string{`spout "s" has no inputs; ZeroCopyInputs is for bolts`}},
		{"same stream subscribed twice", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 2).Input("s", Shuffle()).Input("s", All())
		}, []string{`bolt "a" subscribes to s/default twice`}},
		{"direct and other groupings on one stream", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).Input("s", Direct())
			b.Bolt("b", bolt, 1).Input("s", Shuffle())
		}, []string{`stream s/default is subscribed with Direct grouping by "a" and with shuffle grouping by "b"`}},
		{"unknown component", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).Input("nope", Shuffle())
		}, []string{`unknown component "nope"`}},
		{"unknown stream", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).InputStream("s", "other", Shuffle())
		}, []string{`stream "other" of "s"`, `"default"`}},
		{"cycle", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).Input("s", Shuffle()).Input("b", Shuffle()).Outputs("x")
			b.Bolt("b", bolt, 1).Input("a", Shuffle()).Outputs("x")
		}, []string{"cycle: a -> b -> a"}},
		{"self loop", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).Input("s", Shuffle()).Input("a", Shuffle()).Outputs("x")
		}, []string{"cycle: a -> a"}},
		{"undeclared field", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("line")
			b.Bolt("a", bolt, 1).Input("s", Fields("word"))
		}, []string{`by field "word"`, `["line"]`}},
		{"fields grouping without fields", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("line")
			b.Bolt("a", bolt, 1).Input("s", Fields())
		}, []string{"names no fields"}},
		{"parallelism zero", func(b *Builder) {
			b.Spout("s", spout, 0).Outputs("x")
		}, []string{"parallelism 0"}},
		{"duplicate names", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("s", bolt, 1).Input("s", Shuffle())
		}, []string{`"s" is declared twice`}},
		{"bad names", func(b *Builder) {
			b.Spout("a.b", spout, 1).Outputs("x")
			b.Spout("__x", spout, 1).Outputs("x")
		}, []string{`"a.b"`, `"__x"`}},
		{"duplicate stream and field", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x", "x").Outputs("y")
		}, []string{`field "x" twice`, `stream "default" twice`}},
		{"bolt without inputs", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1)
		}, []string{`bolt "a" has no inputs`}},
		{"no spout", func(b *Builder) {
			b.Bolt("a", bolt, 1).Input("a", Shuffle())
		}, []string{"no spout"}},
		{"empty", func(b *Builder) {}, []string{"no components"}},
		{"spout with input", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x").Input("s", Shuffle())
		}, []string{"only bolts have inputs"}},
		{"missing grouping", func(b *Builder) {
			b.Spout("s", spout, 1).Outputs("x")
			b.Bolt("a", bolt, 1).Input("s", Grouping{})
		}, []string{"has no grouping"}},
		{"nil factory", func(b *Builder) {
			b.Spout("s", nil, 1).Outputs("x")
		}, []string{"nil factory"}},
		{"reserved stream", func(b *Builder) {
			b.Spout("s", spout, 1).Stream("__tick", "x")
		}, []string{"reserved"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder("t")
			tc.build(b)
			topo, err := b.Build()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if topo == nil || topo.Name != "t" {
					t.Fatalf("bad topology %+v", topo)
				}
				return
			}
			if err == nil {
				t.Fatal("want an error, got none")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestBadTopologyName(t *testing.T) {
	b := NewBuilder("has space")
	b.Spout("s", spout, 1).Outputs("x")
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "NATS subjects") {
		t.Fatalf("got %v", err)
	}
}

func TestFieldsIndexResolved(t *testing.T) {
	b := NewBuilder("t")
	b.Spout("s", spout, 1).Outputs("a", "b", "c")
	b.Bolt("x", bolt, 1).Input("s", Fields("c", "a"))
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	got := topo.Component("x").Inputs[0].FieldIdx
	if len(got) != 2 || got[0] != 2 || got[1] != 0 {
		t.Fatalf("field indexes %v, want [2 0]", got)
	}
	subs := topo.Subscribers("s", DefaultStream)
	if len(subs) != 1 || subs[0].Bolt.Name != "x" {
		t.Fatalf("subscribers %+v", subs)
	}
}

func TestTupleAccessors(t *testing.T) {
	tu := &Tuple{Component: "c", Stream: "default", Values: Values{"w", int64(3), 1.5, true, []byte("b"), []any{int64(1)}}, Schema: NewSchema("word", "n", "f", "ok", "raw", "list")}
	if s, err := tu.StringByField("word"); err != nil || s != "w" {
		t.Fatal(s, err)
	}
	if n, err := tu.IntByField("n"); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if f, err := tu.Float(2); err != nil || f != 1.5 {
		t.Fatal(f, err)
	}
	if b, err := tu.Bool(3); err != nil || !b {
		t.Fatal(b, err)
	}
	if b, err := tu.Bytes(4); err != nil || string(b) != "b" {
		t.Fatal(b, err)
	}
	if l, err := tu.List(5); err != nil || len(l) != 1 {
		t.Fatal(l, err)
	}
	if _, err := tu.String(1); err == nil || !strings.Contains(err.Error(), `field 1 ("n") of c/default`) {
		t.Fatalf("type error should name the field: %v", err)
	}
	if _, err := tu.String(9); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("range error: %v", err)
	}
	if tu.ValueByField("nope") != nil {
		t.Fatal("unknown field should give nil")
	}
}

func TestIDsDeterministicAndDistinct(t *testing.T) {
	a := RootID("lines", DefaultStream, MsgID{Partition: 0, Offset: 10})
	if a != RootID("lines", DefaultStream, MsgID{Partition: 0, Offset: 10}) {
		t.Fatal("RootID not deterministic")
	}
	split := func(task int, stream string) uint64 { return TaskKey(StreamKey("split", stream), task) }
	seen := map[uint64]bool{a: true}
	for _, id := range []uint64{
		RootID("lines", DefaultStream, MsgID{Partition: 0, Offset: 11}),
		RootID("lines", DefaultStream, MsgID{Partition: 1, Offset: 10}),
		RootID("other", DefaultStream, MsgID{Partition: 0, Offset: 10}),
		RootID("lines", "errors", MsgID{Partition: 0, Offset: 10}),
		ChildID(a, split(0, DefaultStream), 0),
		ChildID(a, split(0, DefaultStream), 1),
		ChildID(a, split(0, "other"), 0),
		// The same input processed by another task of the component (All
		// grouping) has other children.
		ChildID(a, split(1, DefaultStream), 0),
		ChildID(a, split(2, DefaultStream), 0),
		ChildID(a, TaskKey(StreamKey("count", DefaultStream), 0), 0),
		HashID("w", "1"), HashID("w1"),
	} {
		if seen[id] {
			t.Fatalf("ID collision: %x", id)
		}
		seen[id] = true
	}
	if ChildID(a, split(1, DefaultStream), 3) != ChildID(a, split(1, DefaultStream), 3) {
		t.Fatal("ChildID not deterministic")
	}
}
