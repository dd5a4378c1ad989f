// Package storetest is the conformance suite for checkpoint.Store: every
// implementation runs it, so that the checkpoint layer can rely on the same
// behaviour whichever store holds the objects. It is a non-test package so
// that stores outside this module can run it too.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/ackflow/ackflow/checkpoint"
)

// opener makes a new, empty store for one case.
type opener func(t *testing.T) checkpoint.Store

// Run runs every case against the stores open makes; open is called once
// per case and must return an empty store.
func Run(t *testing.T, open func(t *testing.T) checkpoint.Store) {
	cases := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"RoundTrip", roundTrip},
		{"PutCopiesData", putCopies},
		{"Overwrite", overwrite},
		{"GetMissingIsNotFound", getMissing},
		{"ListByPrefix", listByPrefix},
		{"Delete", deleteObjects},
		{"InvalidNamesRefused", invalidNames},
		{"ConcurrentPuts", concurrentPuts},
		{"CancelledPut", cancelledPut},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

// Bytes returns n bytes that depend on seed, so that a store that mixes up
// two objects, or their chunks, is caught.
func Bytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func roundTrip(t *testing.T, open opener) {
	s := open(t)
	sizes := map[string]int{"empty": 0, "one": 1, "large": 5 << 20}
	for name, n := range sizes {
		put(t, s, "rt/"+name, Bytes(uint64(n), n))
	}
	for name, n := range sizes {
		got := get(t, s, "rt/"+name)
		if !bytes.Equal(got, Bytes(uint64(n), n)) {
			t.Errorf("rt/%s: read back %d bytes that differ from the %d put", name, len(got), n)
		}
	}
	want := []string{"rt/empty", "rt/large", "rt/one"}
	if got := list(t, s, ""); !slices.Equal(got, want) {
		t.Errorf("List(\"\") = %q, want %q", got, want)
	}
}

func putCopies(t *testing.T, open opener) {
	s := open(t)
	data := []byte("original")
	put(t, s, "copy/x", data)
	copy(data, "CHANGED!")
	got := get(t, s, "copy/x")
	if string(got) != "original" {
		t.Fatalf("changing the caller's slice after Put changed the object to %q", got)
	}
	copy(got, "CHANGED!")
	if again := get(t, s, "copy/x"); string(again) != "original" {
		t.Fatalf("changing the slice Get returned changed the object to %q", again)
	}
}

func overwrite(t *testing.T, open opener) {
	s := open(t)
	put(t, s, "ow/x", Bytes(1, 300_000))
	put(t, s, "ow/x", []byte("short"))
	if got := get(t, s, "ow/x"); string(got) != "short" {
		t.Fatalf("after an overwrite, read back %d bytes, want the 5 of the second Put", len(got))
	}
	if got := list(t, s, "ow/"); !slices.Equal(got, []string{"ow/x"}) {
		t.Fatalf("after an overwrite, List = %q, want one name", got)
	}
}

func getMissing(t *testing.T, open opener) {
	s := open(t)
	put(t, s, "gm/a/b", []byte("b"))
	// Besides a plain missing name: a name under an object, and a name
	// that is only a prefix of objects (a directory, in a Dir).
	for _, name := range []string{"gm/missing", "gm/a/b/c", "gm/a", "other/x"} {
		data, err := s.Get(context.Background(), name)
		if !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Get(%q) = %q, %v; want an error wrapping ErrNotFound", name, data, err)
		}
	}
}

func listByPrefix(t *testing.T, open opener) {
	s := open(t)
	names := []string{"a/bc/x", "a/b/y/z", "b/x", "a/b.c", "ab", "a/b/x", "a/b-c", "a/bc2"}
	for i, name := range names {
		put(t, s, name, []byte{byte(i)})
	}
	cases := map[string][]string{
		"":        {"a/b-c", "a/b.c", "a/b/x", "a/b/y/z", "a/bc/x", "a/bc2", "ab", "b/x"},
		"a/b/":    {"a/b/x", "a/b/y/z"},
		"a/b":     {"a/b-c", "a/b.c", "a/b/x", "a/b/y/z", "a/bc/x", "a/bc2"},
		"a/bc":    {"a/bc/x", "a/bc2"},
		"a/bc/":   {"a/bc/x"},
		"a/b/x":   {"a/b/x"},
		"a":       {"a/b-c", "a/b.c", "a/b/x", "a/b/y/z", "a/bc/x", "a/bc2", "ab"},
		"none/":   nil,
		"a/b/y/z": {"a/b/y/z"},
	}
	for prefix, want := range cases {
		got := list(t, s, prefix)
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func deleteObjects(t *testing.T, open opener) {
	s := open(t)
	put(t, s, "del/a/x", []byte("x"))
	put(t, s, "del/a/y", []byte("y"))
	del(t, s, "del/a/x")
	if _, err := s.Get(context.Background(), "del/a/x"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if got := list(t, s, "del/"); !slices.Equal(got, []string{"del/a/y"}) {
		t.Fatalf("List after Delete = %q, want [del/a/y]", got)
	}
	del(t, s, "del/a/x") // again
	del(t, s, "del/never")
	del(t, s, "del/a/y")
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("List after deleting everything = %q", got)
	}
	put(t, s, "del/a/y", []byte("again")) // where a store may have removed directories
	if got := get(t, s, "del/a/y"); string(got) != "again" {
		t.Fatalf("Put after Delete read back %q", got)
	}
}

func invalidNames(t *testing.T, open opener) {
	s := open(t)
	ctx := context.Background()
	for _, name := range []string{
		"", "/", "/a", "a/", "a//b", ".", "..", "../a", "a/../b", "a/./b", "a/..",
		"a b", `a\b`, "a~b", "a:b", "a*", "ä", "a\x00b", "a/b\n",
	} {
		if err := s.Put(ctx, name, []byte("x")); !errors.Is(err, checkpoint.ErrInvalidName) {
			t.Errorf("Put(%q) = %v, want an error wrapping ErrInvalidName", name, err)
		}
		if _, err := s.Get(ctx, name); !errors.Is(err, checkpoint.ErrInvalidName) {
			t.Errorf("Get(%q) = %v, want an error wrapping ErrInvalidName", name, err)
		}
		if err := s.Delete(ctx, name); !errors.Is(err, checkpoint.ErrInvalidName) {
			t.Errorf("Delete(%q) = %v, want an error wrapping ErrInvalidName", name, err)
		}
	}
	for _, prefix := range []string{"/", "../", "a//", "a/../", "a b"} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, checkpoint.ErrInvalidName) {
			t.Errorf("List(%q) = %v, want an error wrapping ErrInvalidName", prefix, err)
		}
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("refused Puts stored %q", got)
	}
}

func concurrentPuts(t *testing.T, open opener) {
	const goroutines, each = 8, 6
	s := open(t)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	name := func(g, i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("cc/shared/g%d-%d", g, i) // one directory for all
		}
		return fmt.Sprintf("cc/g%d/%d", g, i)
	}
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				errs <- s.Put(context.Background(), name(g, i), Bytes(uint64(g*each+i), 1000+i))
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
	if got := list(t, s, "cc/"); len(got) != goroutines*each {
		t.Fatalf("List found %d objects, want %d", len(got), goroutines*each)
	}
	for g := range goroutines {
		for i := range each {
			if got := get(t, s, name(g, i)); !bytes.Equal(got, Bytes(uint64(g*each+i), 1000+i)) {
				t.Errorf("%s read back different bytes", name(g, i))
			}
		}
	}
}

func cancelledPut(t *testing.T, open opener) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, "cancel/x", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context returned %v, want an error wrapping context.Canceled", err)
	}
	if _, err := s.Get(context.Background(), "cancel/x"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("after a cancelled Put, Get returned %v, want ErrNotFound", err)
	}
}

func put(t *testing.T, s checkpoint.Store, name string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), name, data); err != nil {
		t.Fatalf("Put(%q): %v", name, err)
	}
}

func get(t *testing.T, s checkpoint.Store, name string) []byte {
	t.Helper()
	data, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return data
}

func list(t *testing.T, s checkpoint.Store, prefix string) []string {
	t.Helper()
	names, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return names
}

func del(t *testing.T, s checkpoint.Store, name string) {
	t.Helper()
	if err := s.Delete(context.Background(), name); err != nil {
		t.Fatalf("Delete(%q): %v", name, err)
	}
}
