package deadletter_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/deadletter/sinktest"
)

// valuesJSON is the JSON of a letter's values alone.
func valuesJSON(t *testing.T, values []any) string {
	t.Helper()
	b, err := json.Marshal(deadletter.Letter{Values: values})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	return string(fields["values"])
}

// The stored form is read by people and by other tools, so it is pinned.
func TestValueEncoding(t *testing.T) {
	type point struct{ X int }
	cases := []struct {
		value any
		want  string
	}{
		{nil, `{"type":"nil"}`},
		{true, `{"type":"bool","value":true}`},
		{int64(-123), `{"type":"int64","value":"-123"}`},
		{uint64(math.MaxUint64), `{"type":"uint64","value":"18446744073709551615"}`},
		{1.5, `{"type":"float64","value":1.5}`},
		{math.NaN(), `{"type":"float64","value":"NaN"}`},
		{math.Inf(1), `{"type":"float64","value":"+Inf"}`},
		{math.Inf(-1), `{"type":"float64","value":"-Inf"}`},
		{"hi", `{"type":"string","value":"hi"}`},
		{"\xff", `{"type":"string","encoding":"base64","value":"/w=="}`},
		{[]byte("hi"), `{"type":"bytes","value":"aGk="}`},
		{[]byte(nil), `{"type":"bytes","value":null}`},
		{[]any{int64(1)}, `{"type":"list","value":[{"type":"int64","value":"1"}]}`},
		{[]any(nil), `{"type":"list","value":null}`},
		{map[string]any{"k": "v"}, `{"type":"map","value":{"k":{"type":"string","value":"v"}}}`},
		{point{1}, `{"type":"unsupported","go_type":"deadletter_test.point","value":"{1}"}`},
		{deadletter.Unsupported{GoType: "chan int", Text: "0xc000"}, `{"type":"unsupported","go_type":"chan int","value":"0xc000"}`},
	}
	for _, c := range cases {
		if got := valuesJSON(t, []any{c.value}); got != "["+c.want+"]" {
			t.Errorf("%#v encodes as %s, want [%s]", c.value, got, c.want)
		}
	}
	if got := valuesJSON(t, []any{}); got != "[]" {
		t.Errorf("empty values encode as %s, want []", got)
	}
	if got := valuesJSON(t, nil); got != "null" {
		t.Errorf("nil values encode as %s, want null", got)
	}
}

func TestRecordIDIsAString(t *testing.T) {
	b, err := json.Marshal(deadletter.Letter{RecordID: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"record_id":"18446744073709551615"`) {
		t.Fatalf("record_id is not a decimal string in %s", b)
	}
}

// A value nested in itself is stored, cut off, rather than recursing forever.
func TestCyclicValueIsCutOff(t *testing.T) {
	list := []any{nil}
	list[0] = list
	m := deadletter.NewMemory()
	if err := m.Put(t.Context(), deadletter.Letter{Values: []any{list}}); err != nil {
		t.Fatal(err)
	}
	v := m.Letters()[0].Values[0]
	for range 64 {
		v = v.([]any)[0]
	}
	if u, ok := v.(deadletter.Unsupported); !ok || u.GoType != "[]interface {}" {
		t.Fatalf("the 65th level is %#v, want an Unsupported []interface {}", v)
	}
}

func TestDecodingRefusesWhatItDoesNotKnow(t *testing.T) {
	cases := []struct{ values, want string }{
		{`[{"type":"int32","value":"1"}]`, `value 0: unknown value type "int32"`},
		{`[{"value":"1"}]`, `value 0: value has no "type" tag`},
		{`[{"type":"int64","value":"1.5"}]`, `value 0: int64 value: strconv.ParseInt`},
		{`[{"type":"int64","value":1}]`, `value 0: int64 value: json: cannot unmarshal number`},
		{`[{"type":"uint64","value":"-1"}]`, `value 0: uint64 value: strconv.ParseUint`},
		{`[{"type":"bool"}]`, `value 0: bool value is missing`},
		{`[{"type":"float64","value":"Infinity"}]`, `value 0: float64 value "Infinity": want a number, "NaN", "+Inf" or "-Inf"`},
		{`[{"type":"bytes","value":"!"}]`, `value 0: bytes value: illegal base64`},
		{`[{"type":"string","encoding":"hex","value":"ff"}]`, `value 0: string value has unknown encoding "hex"`},
		{`[{"type":"nil"},{"type":"list","value":[{"type":"map","value":{"k":{"type":"?"}}}]}]`, `value 1: [0]: ["k"]: unknown value type "?"`},
	}
	for _, c := range cases {
		var l deadletter.Letter
		err := json.Unmarshal([]byte(`{"values":`+c.values+`}`), &l)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decoding %s: got error %v, want one containing %q", c.values, err, c.want)
		}
	}
}

// FuzzLetterJSON checks that decoding never panics and that whatever
// decodes is stored again exactly: decode, encode, decode gives the same
// letter.
func FuzzLetterJSON(f *testing.F) {
	b, err := json.Marshal(sinktest.SampleLetter(1, sinktest.EveryValue()...))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"values":[{"type":"list","value":[{"type":"float64","value":-0}]}]}`))
	f.Add([]byte(`{"record_id":"12","values":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var first deadletter.Letter
		if json.Unmarshal(data, &first) != nil {
			return
		}
		again, err := json.Marshal(first)
		if err != nil {
			return // a time outside years 0-9999 decodes but does not encode
		}
		var second deadletter.Letter
		if err := json.Unmarshal(again, &second); err != nil {
			t.Fatalf("re-encoded letter does not decode: %v\n%s", err, again)
		}
		if diff := sinktest.Diff(second, first); diff != "" {
			t.Fatal(diff)
		}
	})
}
