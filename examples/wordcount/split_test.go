package wordcount

import (
	"reflect"
	"testing"
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
