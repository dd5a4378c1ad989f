// Package sinktest is the conformance suite for deadletter.Sink: every
// implementation runs it, so that a letter means the same thing whichever
// sink stored it. It is a non-test package so that sinks outside this
// module can run it too.
package sinktest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/deadletter"
)

// opener makes a new, empty sink for one case, and read returns every letter
// it stored. The suite calls read only after closing the sink; read reports
// its own errors through the t given to Open.
type opener func(t *testing.T) (sink deadletter.Sink, read func() []deadletter.Letter)

// Run runs every case against the sinks open makes.
func Run(t *testing.T, open func(t *testing.T) (sink deadletter.Sink, read func() []deadletter.Letter)) {
	cases := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"RoundTripsEveryValueType", roundTrip},
		{"ConcurrentPutsAllArrive", concurrentPuts},
		{"PutAfterCloseFails", putAfterClose},
		{"EmptySinkReadsNothing", empty},
		{"UnsupportedValueIsStored", unsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

// SampleLetter is a letter of record id with every field set.
func SampleLetter(id uint64, values ...any) deadletter.Letter {
	return deadletter.Letter{
		Topology: "conformance", Spout: "source", SpoutTask: 3, Stream: "default",
		Partition: -7, Offset: math.MaxInt64 - 1, RecordID: id, Attempts: 5,
		Error: "sink bolt: connection refused", Component: "sink", Task: 11,
		Values: values,
		Time:   time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+2", 2*3600)),
	}
}

// EveryValue holds each type of the value set, with the edge cases of each:
// the extremes of the integers, the floats JSON cannot write, strings and
// map keys that are not UTF-8, nil against empty slices and maps, and
// nesting.
func EveryValue() []any {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return []any{
		nil, true, false,
		int64(0), int64(math.MinInt64), int64(math.MaxInt64), int64(-123),
		uint64(0), uint64(math.MaxUint64), uint64(1<<53 + 1),
		1.5, 0.1, math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64,
		math.NaN(), math.Inf(1), math.Inf(-1),
		"", "héllo, 世界\n\"quoted\"\x00", "not UTF-8: \xff\xfe", []byte{}, []byte(nil), all,
		[]any{}, []any(nil), map[string]any{}, map[string]any(nil),
		[]any{int64(1), "two", []any{uint64(3), []byte("four"), map[string]any{"five": 5.5}}},
		map[string]any{"": nil, "list": []any{math.NaN(), false}, "map": map[string]any{"x": int64(-1)}},
		map[string]any{"\xff": "keys that are not UTF-8", "\xfe": "are two keys, not one U+FFFD"},
	}
}

func roundTrip(t *testing.T, open opener) {
	sink, read := open(t)
	want := SampleLetter(0xfedcba9876543210, EveryValue()...)
	put(t, sink, want)
	closeSink(t, sink)
	got := read()
	if len(got) != 1 {
		t.Fatalf("read %d letters, want 1", len(got))
	}
	if diff := Diff(got[0], want); diff != "" {
		t.Fatal(diff)
	}
}

func concurrentPuts(t *testing.T, open opener) {
	const goroutines, each = 8, 25
	sink, read := open(t)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				id := uint64(g*each + i)
				errs <- sink.Put(context.Background(), SampleLetter(id, int64(id)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	closeSink(t, sink)
	seen := map[uint64]bool{}
	for _, l := range read() {
		if seen[l.RecordID] {
			t.Errorf("record %d stored twice", l.RecordID)
		}
		seen[l.RecordID] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("read %d distinct letters, want %d", len(seen), goroutines*each)
	}
}

func putAfterClose(t *testing.T, open opener) {
	sink, _ := open(t)
	closeSink(t, sink)
	if err := sink.Put(context.Background(), SampleLetter(1)); !errors.Is(err, deadletter.ErrClosed) {
		t.Fatalf("Put after Close returned %v, want ErrClosed", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func empty(t *testing.T, open opener) {
	sink, read := open(t)
	closeSink(t, sink)
	if got := read(); len(got) != 0 {
		t.Fatalf("an empty sink read %d letters: %v", len(got), got)
	}
}

func unsupported(t *testing.T, open opener) {
	type point struct{ X, Y int }
	sink, read := open(t)
	put(t, sink, SampleLetter(2, point{1, 2}, 7, []string{"a"}, "fine"))
	closeSink(t, sink)
	got := read()
	if len(got) != 1 {
		t.Fatalf("read %d letters, want 1", len(got))
	}
	want := []any{
		deadletter.Unsupported{GoType: "sinktest.point", Text: "{1 2}"},
		deadletter.Unsupported{GoType: "int", Text: "7"},
		deadletter.Unsupported{GoType: "[]string", Text: "[a]"},
		"fine",
	}
	if !SameValue(got[0].Values, want) {
		t.Fatalf("values read back as %#v, want %#v", got[0].Values, want)
	}
}

func put(t *testing.T, sink deadletter.Sink, l deadletter.Letter) {
	t.Helper()
	if err := sink.Put(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

func closeSink(t *testing.T, sink deadletter.Sink) {
	t.Helper()
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// Diff describes how got differs from want, or returns "" if they are the
// same letter: times are compared with Equal (a stored time loses its
// monotonic reading and location), values with SameValue.
func Diff(got, want deadletter.Letter) string {
	if !got.Time.Equal(want.Time) {
		return fmt.Sprintf("time read back as %v, want %v", got.Time, want.Time)
	}
	if !SameValue(got.Values, want.Values) {
		return fmt.Sprintf("values read back as\n%#v\nwant\n%#v", got.Values, want.Values)
	}
	got.Time, want.Time, got.Values, want.Values = time.Time{}, time.Time{}, nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("letter read back as\n%+v\nwant\n%+v", got, want)
	}
	return ""
}

// SameValue is reflect.DeepEqual, except that floats are compared bit for
// bit (NaN is the same as NaN, and 0 is not -0): a stored record must be
// the same record, and DeepEqual says NaN differs from itself.
func SameValue(a, b any) bool {
	if fa, ok := a.(float64); ok {
		fb, ok := b.(float64)
		return ok && (math.Float64bits(fa) == math.Float64bits(fb) || math.IsNaN(fa) && math.IsNaN(fb))
	}
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	switch x := a.(type) {
	case []any:
		return sameList(x, b.([]any))
	case map[string]any:
		return sameMap(x, b.(map[string]any))
	}
	return reflect.DeepEqual(a, b)
}

func sameList(a, b []any) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if !SameValue(a[i], b[i]) {
			return false
		}
	}
	return true
}

func sameMap(a, b map[string]any) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !SameValue(va, vb) {
			return false
		}
	}
	return true
}
