package topology

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestCountersMatchAMap runs random Adds, Gets, Deletes and Ranges on
// Counters and on a Go map, the oracle, and compares them after every
// step: keys of every length from 0 to 24 bytes (inline and long), keys
// that differ in one byte only, enough of them to grow the table several
// times, and deletes enough to fill it with tombstones.
func TestCountersMatchAMap(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		keys := testKeys(r, 3000)
		c, want := newCounters(), map[string]int64{}
		for step := 0; step < 60000; step++ {
			k := keys[r.IntN(len(keys))]
			switch op := r.IntN(10); {
			case op < 6:
				d := r.Int64N(7) - 2
				want[k] += d
				if got := c.Add(k, d); got != want[k] {
					t.Fatalf("seed %d step %d: Add(%q, %d) = %d, want %d", seed, step, k, d, got, want[k])
				}
			case op < 8:
				if got := c.Get(k); got != want[k] {
					t.Fatalf("seed %d step %d: Get(%q) = %d, want %d", seed, step, k, got, want[k])
				}
			default:
				delete(want, k)
				c.Delete(k)
			}
			if c.Len() != len(want) {
				t.Fatalf("seed %d step %d: Len %d, want %d", seed, step, c.Len(), len(want))
			}
		}
		if got := countersAsMap(t, c); !sameCounts(got, want) {
			t.Fatalf("seed %d: Range gave %d keys, want %d (or counts differ)", seed, len(got), len(want))
		}
	}
}

// testKeys returns n distinct keys: every length from 0 to 24, many
// pairs differing in one byte at every position, and bytes of every value
// (0 included).
func testKeys(r *rand.Rand, n int) []string {
	seen := map[string]bool{}
	var keys []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	add("")
	for len(keys) < n {
		b := make([]byte, r.IntN(25))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		add(string(b))
		if len(b) > 0 { // a neighbour differing in one byte
			b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
			add(string(b))
		}
	}
	return keys
}

// TestCountersKeysOfEveryShortShape: every key of up to three bytes over
// a small alphabet, and keys of 4 to 16 bytes differing in a single
// position, are told apart and given back by Range as they went in.
func TestCountersKeysOfEveryShortShape(t *testing.T) {
	c, want := newCounters(), map[string]int64{}
	alpha := "ab\x00z"
	var short func(prefix string)
	short = func(prefix string) {
		want[prefix] = int64(len(want) + 1)
		if len(prefix) < 3 {
			for i := range alpha {
				short(prefix + alpha[i:i+1])
			}
		}
	}
	short("")
	for n := 4; n <= inlineKey+1; n++ {
		base := strings.Repeat("x", n)
		for i := range n {
			want[base[:i]+"y"+base[i+1:]] = int64(len(want) + 1)
		}
		want[base] = int64(len(want) + 1)
	}
	for k, v := range want {
		c.Add(k, v)
	}
	if got := countersAsMap(t, c); !sameCounts(got, want) {
		t.Fatalf("Range gave %v, want %v", got, want)
	}
}

// TestCountersRangeWhileChanging: fn may delete keys and add new ones, as
// with a Go map; every key present throughout is visited exactly once with
// its current count, deleted keys not after their deletion, and a table
// that grows under Range changes none of that.
func TestCountersRangeWhileChanging(t *testing.T) {
	c := newCounters()
	for i := range 100 {
		c.Add(fmt.Sprintf("k%d", i), int64(i))
	}
	visits, deleted := map[string]int{}, map[string]bool{}
	c.Range(func(k string, n int64) bool {
		if deleted[k] {
			t.Fatalf("visited %q after deleting it", k)
		}
		visits[k]++
		if want := c.Get(k); n != want {
			t.Fatalf("%q visited with %d, its count is %d", k, n, want)
		}
		if len(visits)%3 == 0 { // delete a key not yet seen, perhaps
			for i := range 100 {
				if d := fmt.Sprintf("k%d", i); visits[d] == 0 && !deleted[d] {
					c.Delete(d)
					deleted[d] = true
					break
				}
			}
		}
		for i := range 20 { // enough new keys to grow the table
			c.Add(fmt.Sprintf("new%d-%d", len(visits), i), 1)
		}
		return true
	})
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		if !deleted[k] && visits[k] != 1 {
			t.Fatalf("%q visited %d times", k, visits[k])
		}
	}
}

// TestCountersSnapshotAfterDeletes: a snapshot of counters with
// tombstones and long keys restores to the same counts.
func TestCountersSnapshotAfterDeletes(t *testing.T) {
	s := NewState(8)
	c, want := s.Counters("c"), map[string]int64{}
	for i := range 500 {
		k := fmt.Sprintf("key-%d", i)
		if i%7 == 0 {
			k = strings.Repeat("long", 5) + k
		}
		c.Add(k, int64(i))
		want[k] = int64(i)
		if i%3 == 0 {
			c.Delete(k)
			delete(want, k)
		}
	}
	r := NewState(8)
	kept := r.Counters("c")
	if err := r.Restore(s.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	if got := countersAsMap(t, kept); !sameCounts(got, want) {
		t.Fatalf("restored %d keys, want %d (or counts differ)", len(got), len(want))
	}
}

func countersAsMap(t *testing.T, c *Counters) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	c.Range(func(k string, n int64) bool {
		if _, dup := got[k]; dup {
			t.Fatalf("Range gave %q twice", k)
		}
		got[k] = n
		return true
	})
	return got
}

func sameCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
