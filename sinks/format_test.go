package sinks

import (
	"math"
	"strings"
	"testing"
)

func TestTabSeparated(t *testing.T) {
	for _, tc := range []struct {
		values []any
		want   string
	}{
		{nil, "\n"},
		{[]any{"a"}, "a\n"},
		{[]any{"a", int64(-3), uint64(7), 1.5, true, nil}, "a\t-3\t7\t1.5\ttrue\t<nil>\n"},
		{[]any{[]byte{1, 2}, []any{"x", int64(1)}, map[string]any{"k": "v"}}, "[1 2]\t[x 1]\tmap[k:v]\n"},
	} {
		got, err := TabSeparated(tuple(1, tc.values...))
		if err != nil || string(got) != tc.want {
			t.Errorf("TabSeparated(%v) = %q, %v; want %q", tc.values, got, err, tc.want)
		}
	}
}

func TestJSONArray(t *testing.T) {
	got, err := JSONArray(tuple(1, "a", int64(-3), uint64(7), 1.5, true, nil, []byte("hi"), []any{int64(1)}, map[string]any{"b": "2", "a": "1"}))
	want := `["a",-3,7,1.5,true,null,"aGk=",[1],{"a":"1","b":"2"}]`
	if err != nil || string(got) != want {
		t.Fatalf("JSONArray = %s, %v; want %s", got, err, want)
	}
	_, err = JSONArray(tuple(0xab, math.NaN()))
	if err == nil || !strings.Contains(err.Error(), "00000000000000ab") || !strings.Contains(err.Error(), "Encode") {
		t.Fatalf("JSONArray of a NaN: %v", err)
	}
}
