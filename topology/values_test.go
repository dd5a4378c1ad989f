package topology

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestNormalizeValues(t *testing.T) {
	type custom struct{ A int }
	deep := any(int64(1))
	for i := 0; i < 9; i++ {
		deep = []any{deep}
	}
	cases := []struct {
		name string
		in   any
		want any    // after normalisation
		err  string // substring of the error; empty: accepted
	}{
		{"string", "x", "x", ""},
		{"int64", int64(-5), int64(-5), ""},
		{"int", 7, int64(7), ""},
		{"int8", int8(-8), int64(-8), ""},
		{"int16", int16(300), int64(300), ""},
		{"int32", int32(-70000), int64(-70000), ""},
		{"uint64 max", uint64(math.MaxUint64), uint64(math.MaxUint64), ""},
		{"uint", uint(9), uint64(9), ""},
		{"uint8", uint8(255), uint64(255), ""},
		{"uint16", uint16(65535), uint64(65535), ""},
		{"uint32", uint32(1 << 31), uint64(1 << 31), ""},
		{"float32", float32(1.5), float64(1.5), ""},
		{"float64", 2.25, 2.25, ""},
		{"bool", true, true, ""},
		{"nil", nil, nil, ""},
		{"bytes", []byte("ab"), []byte("ab"), ""},
		{"nil bytes", []byte(nil), []byte{}, ""},
		{"list widened inside", []any{1, "a", []any{int32(2)}}, []any{int64(1), "a", []any{int64(2)}}, ""},
		{"nil list", []any(nil), []any{}, ""},
		{"map widened inside", map[string]any{"n": uint8(1), "l": []any{float32(0.5)}}, map[string]any{"n": uint64(1), "l": []any{0.5}}, ""},
		{"nil map", map[string]any(nil), map[string]any{}, ""},
		{"struct", custom{1}, nil, "is topology.custom: not in the value set"},
		{"pointer", &custom{}, nil, "is *topology.custom"},
		{"typed slice", []string{"a"}, nil, "is []string"},
		{"typed map", map[string]int{"a": 1}, nil, "is map[string]int"},
		{"bad type deep in a list", []any{1, []any{"x", complex(1, 2)}}, nil, "value 0[1][1] is complex128"},
		{"bad type in a map", map[string]any{"k": struct{}{}}, nil, `value 0["k"] is struct {}`},
		{"too deep", deep, nil, "nest more than 8 deep"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := Values{tc.in}
			size, err := NormalizeValues(vs)
			if tc.err != "" {
				var ve *ValueError
				if err == nil || !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want a *ValueError containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(vs[0], tc.want) {
				t.Fatalf("normalised to %#v (%T), want %#v (%T)", vs[0], vs[0], tc.want, tc.want)
			}
			if size < 1 {
				t.Fatalf("size %d", size)
			}
		})
	}
}

func TestValueErrorNamesTheField(t *testing.T) {
	vs := Values{"ok", struct{}{}}
	_, err := NormalizeValues(vs)
	var ve *ValueError
	if !errors.As(err, &ve) || ve.Field != 1 {
		t.Fatalf("got %v", err)
	}
	ve.Name = "payload"
	if !strings.Contains(ve.Error(), `field "payload" is struct {}`) {
		t.Fatalf("message %q does not name the field", ve.Error())
	}
}

// TestStringValues checks that values built on the strings' own headers
// read, normalise and encode like converted strings, and cost one
// allocation however many strings there are.
func TestStringValues(t *testing.T) {
	words := strings.Fields("to be or not to be")
	vs := StringValues(words)
	want := make(Values, len(words))
	for i, w := range words {
		want[i] = w
	}
	if !reflect.DeepEqual(vs, want) {
		t.Fatalf("StringValues = %#v, want %#v", vs, want)
	}
	size, err := NormalizeValues(vs)
	if err != nil {
		t.Fatal(err)
	}
	wantSize, _ := NormalizeValues(want)
	if size != wantSize {
		t.Fatalf("encoded size %d, want %d", size, wantSize)
	}
	if s, _ := vs[3].(string); s != "not" {
		t.Fatalf("vs[3] = %#v", vs[3])
	}
	if len(StringValues(nil)) != 0 {
		t.Fatal("StringValues(nil) is not empty")
	}
	if n := testing.AllocsPerRun(100, func() { vs = StringValues(words) }); n != 1 {
		t.Fatalf("StringValues allocates %.0f times for %d strings, want 1", n, len(words))
	}
}
