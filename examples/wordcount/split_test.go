package wordcount

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/topology"
)

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"--!?", nil},
		{"hello", []string{"hello"}},
		{"Hello World", []string{"hello", "world"}},
		{"  leading and trailing  ", []string{"leading", "and", "trailing"}},
		{"comma,separated;words.end", []string{"comma", "separated", "words", "end"}},
		{"don't", []string{"don", "t"}},
		{"snake_case kebab-case", []string{"snake", "case", "kebab", "case"}},
		{"x42 42 4x2", []string{"x42", "42", "4x2"}},
		{"tab\tnew\nline\r\n", []string{"tab", "new", "line"}},
		{"Straße ÜBER naïve", []string{"straße", "über", "naïve"}},
		{"日本語 テキスト", []string{"日本語", "テキスト"}},
		{"ΑΒΓ αβγ", []string{"αβγ", "αβγ"}},
		{"café—bar", []string{"café", "bar"}},                    // em dash is punctuation
		{"١٢٣ arabic-indic", []string{"١٢٣", "arabic", "indic"}}, // Nd digits
		{"emoji🙂inside", []string{"emoji", "inside"}},
		{"NATS", []string{"nats"}},
	} {
		got := SplitWords(tc.line)
		if len(got) == 0 && len(tc.want) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitWords(%q) = %q; want %q", tc.line, got, tc.want)
		}
	}
}

// BenchmarkSplitWords is split's user code per line of the bundled text.
func BenchmarkSplitWords(b *testing.B) {
	lines := strings.Split(string(Bundled()), "\n")
	i := 0
	for b.Loop() {
		SplitWords(lines[i])
		if i++; i == len(lines) {
			i = 0
		}
	}
}

// BenchmarkCountBolt is count's user code per word: a keyed-state counter
// (hash of the word into a key group, a map increment).
func BenchmarkCountBolt(b *testing.B) {
	var words []string
	for _, l := range strings.Split(string(Bundled()), "\n") {
		words = append(words, SplitWords(l)...)
	}
	c := &CountBolt{}
	if err := c.Prepare(topology.TaskContext{State: topology.NewState(topology.DefaultKeyGroups)}); err != nil {
		b.Fatal(err)
	}
	schema := topology.NewSchema("word")
	tuples := make([]topology.Tuple, len(words))
	for i, w := range words {
		tuples[i] = topology.Tuple{Values: topology.Values{w}, Schema: schema}
	}
	i := 0
	for b.Loop() {
		c.Execute(&tuples[i], nil)
		if i++; i == len(tuples) {
			i = 0
		}
	}
}
