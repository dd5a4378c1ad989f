package strbox

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestLayout checks the assumption the package rests on: an interface
// holding a string is a type word and a pointer to the string's header.
func TestLayout(t *testing.T) {
	if unsafe.Sizeof(any(nil)) != unsafe.Sizeof(eface{}) {
		t.Fatalf("an interface is %d bytes, eface %d", unsafe.Sizeof(any(nil)), unsafe.Sizeof(eface{}))
	}
	s := strings.Repeat("x", 3)
	v := any(s)
	e := (*eface)(unsafe.Pointer(&v))
	if e.typ != stringType {
		t.Fatal("the type word of any(string) is not the one strbox uses")
	}
	if got := *(*string)(e.data); got != s {
		t.Fatalf("the data word does not point to the header: %q", got)
	}
}

func TestRef(t *testing.T) {
	words := strings.Fields("the quick brown fox")
	vals := make([]any, len(words))
	for i := range words {
		vals[i] = Ref(&words[i])
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok || s != words[i] {
			t.Fatalf("value %d: %#v, want %q", i, v, words[i])
		}
		if reflect.TypeOf(v) != reflect.TypeOf("") {
			t.Fatalf("value %d has type %v", i, reflect.TypeOf(v))
		}
	}
	// Usable as any other string in an interface: comparison, map keys,
	// type switches.
	m := map[any]int{}
	for _, v := range vals {
		m[v]++
	}
	if m["fox"] != 1 || vals[1] != any("quick") {
		t.Fatalf("map or comparison: %v", m)
	}
	if n := testing.AllocsPerRun(100, func() { vals[0] = Ref(&words[0]) }); n != 0 {
		t.Fatalf("Ref allocates %.0f times", n)
	}
}

func TestCopy(t *testing.T) {
	for _, in := range []string{"", "a", "word", strings.Repeat("long ", 100)} {
		b := []byte(in)
		v := Copy(b)
		for i := range b {
			b[i] = '!' // the copy must not share the caller's bytes
		}
		if s, ok := v.(string); !ok || s != in {
			t.Fatalf("Copy(%q) = %#v", in, v)
		}
	}
	b := []byte("word")
	if n := testing.AllocsPerRun(100, func() { _ = Copy(b) }); n != 1 {
		t.Fatalf("Copy allocates %.0f times, want 1", n)
	}
}

// TestCopySurvivesCollections keeps only the strings taken out of the
// interfaces, or only the interfaces, across collections and checks that
// the bytes are intact: the object is allocated without pointers, so it
// must stay alive through the string's own pointer into it.
func TestCopySurvivesCollections(t *testing.T) {
	const n = 20000
	want := make([]string, n)
	strs := make([]string, n)
	ifaces := make([]any, n)
	for i := range n {
		want[i] = strings.Repeat(string(rune('a'+i%26)), 1+i%40)
		v := Copy([]byte(want[i]))
		if i%2 == 0 {
			strs[i] = v.(string)
		} else {
			ifaces[i] = v
		}
		if i%1000 == 0 {
			runtime.GC()
		}
	}
	// Garbage of the same size classes, so that freed objects would be
	// reused and overwritten.
	for i := range n {
		_ = Copy([]byte(strings.Repeat("#", 1+i%40)))
	}
	runtime.GC()
	runtime.GC()
	for i := range n {
		got := strs[i]
		if i%2 == 1 {
			got = ifaces[i].(string)
		}
		if got != want[i] {
			t.Fatalf("value %d: %q, want %q", i, got, want[i])
		}
	}
}

func BenchmarkBox(b *testing.B) {
	words := strings.Fields("the quick brown fox jumps over the lazy dog")
	bs := []byte("word")
	vals := make([]any, len(words))
	b.Run("conversion", func(b *testing.B) {
		for b.Loop() {
			for i := range words {
				vals[i] = words[i]
			}
		}
	})
	b.Run("Ref", func(b *testing.B) {
		for b.Loop() {
			for i := range words {
				vals[i] = Ref(&words[i])
			}
		}
	})
	b.Run("string-then-any", func(b *testing.B) {
		for b.Loop() {
			vals[0] = string(bs)
		}
	})
	b.Run("Copy", func(b *testing.B) {
		for b.Loop() {
			vals[0] = Copy(bs)
		}
	})
}
