package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

func TestSettings(t *testing.T) {
	s, err := parseSettings([]string{"input=/tmp/a=b.txt", "rate=2.5", "every=1s", "n=3"})
	if err != nil {
		t.Fatal(err)
	}
	if s.String("input", "") != "/tmp/a=b.txt" || s.String("missing", "def") != "def" {
		t.Fatalf("strings: %v", s)
	}
	if f, err := s.Float("rate", 0); err != nil || f != 2.5 {
		t.Fatalf("rate = %v, %v", f, err)
	}
	if d, err := s.Duration("every", 0); err != nil || d != time.Second {
		t.Fatalf("every = %v, %v", d, err)
	}
	if n, err := s.Int("n", 0); err != nil || n != 3 {
		t.Fatalf("n = %v, %v", n, err)
	}
	if _, err := s.Int("rate", 0); err == nil || !strings.Contains(err.Error(), "rate") {
		t.Fatalf("a non-integer was read as one: %v", err)
	}
	if err := s.Only("input", "rate"); err == nil || !strings.Contains(err.Error(), `"every"`) && !strings.Contains(err.Error(), `"n"`) {
		t.Fatalf("Only let unknown settings through: %v", err)
	}
	if err := s.Only("input", "rate", "every", "n"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"novalue"}, {"=x"}, {"a=1", "a=2"}} {
		if _, err := parseSettings(bad); err == nil {
			t.Errorf("parseSettings(%q) accepted", bad)
		}
	}
}

func TestCheckSpecRefusesBeforeSubmitting(t *testing.T) {
	topos := Bundled()
	cases := map[string]struct {
		spec specArgs
		want string
	}{
		"unknown topology":                 {specArgs{name: "nope", guarantee: "at-least-once"}, "no topology nope"},
		"unknown setting":                  {specArgs{name: "wordcount", guarantee: "at-least-once", settings: Settings{"colour": "red"}}, `unknown setting "colour"`},
		"bad rate":                         {specArgs{name: "wordcount", guarantee: "at-least-once", settings: Settings{"rate": "fast"}}, "not a number"},
		"missing updates":                  {specArgs{name: "wordcount", guarantee: "at-least-once", settings: Settings{"updates": "/nonexistent/dir"}}, "not a directory"},
		"exactly-once without checkpoints": {specArgs{name: "wordcount", guarantee: "exactly-once", none: true}, "exactly-once needs checkpoints"},
		"at-most-once with checkpoints":    {specArgs{name: "wordcount", guarantee: "at-most-once", every: time.Second}, "checkpoints need at-least-once or exactly-once"},
		"resume without checkpoints":       {specArgs{name: "wordcount", guarantee: "at-least-once", none: true, resume: true}, "takes none"},
		"bad guarantee":                    {specArgs{name: "wordcount", guarantee: "twice"}, "unknown guarantee"},
		"bad component":                    {specArgs{name: "wordcount", guarantee: "at-least-once", par: map[string]int{"nope": 2}}, "no component nope"},
	}
	for name, c := range cases {
		err := checkSpec(topos, c.spec.spec())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	for _, ok := range []specArgs{
		{name: "wordcount", guarantee: "exactly-once", par: map[string]int{"count": 4}},
		{name: "wordcount", guarantee: "at-most-once"},
		{name: "wordcount", guarantee: "at-least-once", none: true},
	} {
		if err := checkSpec(topos, ok.spec()); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

type specArgs struct {
	name, guarantee string
	settings        Settings
	par             map[string]int
	every           time.Duration
	none, resume    bool
}

func (a specArgs) spec() cluster.Spec {
	return cluster.Spec{Name: a.name, Guarantee: a.guarantee, Settings: a.settings, Parallelism: a.par, CheckpointEvery: a.every, NoCheckpoints: a.none, Resume: a.resume}
}
