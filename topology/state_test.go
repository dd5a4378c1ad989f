package topology

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestStateSnapshotRoundTrip(t *testing.T) {
	s := NewState(16)
	counts, bytes := s.Counters("counts"), s.Map("last")
	for i := 0; i < 1000; i++ {
		counts.Add(fmt.Sprint(i%300), int64(i))
		bytes.Put(fmt.Sprint(i%70), []byte{byte(i)})
	}
	counts.Delete("7")
	bytes.Delete("8")
	snap := s.AppendSnapshot(nil)

	r := NewState(16)
	kept := r.Counters("counts") // a handle taken before Restore, as a bolt's Prepare does
	r.Counters("gone").Add("x", 1)
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if kept.Len() != counts.Len() || r.Map("last").Len() != bytes.Len() || r.Counters("gone").Len() != 0 {
		t.Fatalf("restored %d counters, %d bytes, %d gone; want %d, %d, 0", kept.Len(), r.Map("last").Len(), r.Counters("gone").Len(), counts.Len(), bytes.Len())
	}
	counts.Range(func(k string, n int64) bool {
		if kept.Get(k) != n {
			t.Fatalf("counter %q: %d, want %d", k, kept.Get(k), n)
		}
		return true
	})
	bytes.Range(func(k string, v []byte) bool {
		if got, ok := r.Map("last").Get(k); !ok || string(got) != string(v) {
			t.Fatalf("value %q: %v, want %v", k, got, v)
		}
		return true
	})
	if kept.Add("1", 1) != counts.Get("1")+1 {
		t.Fatal("a handle taken before Restore does not see the restored state")
	}
}

func TestStateRestoreRefusesBadSnapshots(t *testing.T) {
	s := NewState(16)
	s.Counters("c").Add("a", 1)
	snap := s.AppendSnapshot(nil)
	for name, bad := range map[string][]byte{
		"empty":      nil,
		"truncated":  snap[:len(snap)-1],
		"version":    append([]byte{9}, snap[1:]...),
		"key groups": NewState(32).AppendSnapshot(nil),
	} {
		r := NewState(16)
		r.Counters("c").Add("z", 5)
		if err := r.Restore(bad); !errors.Is(err, ErrStateSnapshot) {
			t.Errorf("%s: got %v", name, err)
		}
		if r.Counters("c").Len() != 0 {
			t.Errorf("%s: a refused snapshot left state behind", name)
		}
	}
}

// TestKeyGroupsMatchFieldsGrouping: a string key's key group is the one
// Fields grouping computes for a record whose one grouping field is that
// string, and key groups are spread over tasks in contiguous ranges.
func TestKeyGroupsMatchFieldsGrouping(t *testing.T) {
	s := NewState(DefaultKeyGroups)
	for _, k := range []string{"", "a", "the", "ünïcode"} {
		if g := KeyGroup(HashValue(HashSeed, k), DefaultKeyGroups); s.KeyGroup(k) != g {
			t.Fatalf("%q: %d vs %d", k, s.KeyGroup(k), g)
		}
	}
	for _, p := range []int{1, 2, 3, 7, 128} {
		next := 0
		for i := 0; i < p; i++ {
			from, to := KeyGroupRange(DefaultKeyGroups, p, i)
			if from != next || to <= from {
				t.Fatalf("p=%d task %d: range [%d,%d) after %d", p, i, from, to, next)
			}
			for g := from; g < to; g++ {
				if KeyGroupOwner(g, DefaultKeyGroups, p) != i {
					t.Fatalf("p=%d: group %d owned by %d, range says %d", p, g, KeyGroupOwner(g, DefaultKeyGroups, p), i)
				}
			}
			next = to
		}
		if next != DefaultKeyGroups {
			t.Fatalf("p=%d: ranges end at %d", p, next)
		}
	}
}

// TestRestoreGroupsSplitsStateByKeyGroup: the state of two tasks, gathered
// into three by key group, puts every key in the task that owns its group
// now, and loses none.
func TestRestoreGroupsSplitsStateByKeyGroup(t *testing.T) {
	const groups = 16
	var snaps [][]byte
	want := map[string]int64{}
	for task := 0; task < 2; task++ {
		s := NewState(groups)
		for i := 0; i < 500; i++ {
			k := fmt.Sprint(i)
			if KeyGroupOwner(s.KeyGroup(k), groups, 2) == task {
				s.Counters("c").Add(k, int64(i))
				want[k] = int64(i)
			}
		}
		snaps = append(snaps, s.AppendSnapshot(nil))
	}
	got := map[string]int64{}
	for task := 0; task < 3; task++ {
		s := NewState(groups)
		from, to := KeyGroupRange(groups, 3, task)
		if err := s.RestoreGroups(snaps, from, to); err != nil {
			t.Fatal(err)
		}
		s.Counters("c").Range(func(k string, n int64) bool {
			if g := s.KeyGroup(k); g < from || g >= to {
				t.Fatalf("task %d holds %q of key group %d, outside [%d,%d)", task, k, g, from, to)
			}
			got[k] = n
			return true
		})
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys after regrouping, want %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%q: %d, want %d", k, got[k], n)
		}
	}
}

// BenchmarkCountersAdd is a keyed count's work per record: 5,000 distinct
// words in a Zipf mix, as in word count, almost all of them already
// counted.
func BenchmarkCountersAdd(b *testing.B) {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 4999)
	words := make([]string, 1<<16)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", z.Uint64())
	}
	c := NewState(DefaultKeyGroups).Counters("words")
	for _, w := range words {
		c.Add(w, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Add(words[i&(len(words)-1)], 1)
		i++
	}
}

// TestStateSnapshotFormat: the encoding is the documented one (version,
// key groups, then per collection its kind, name, non-empty groups and
// their entries), so checkpoints taken by other builds restore, and each
// key is listed under its own key group.
func TestStateSnapshotFormat(t *testing.T) {
	s := NewState(4)
	s.Counters("c").Add("a", 5)
	s.Map("m").Put("b", []byte("xy"))
	ga, gb := byte(s.KeyGroup("a")), byte(s.KeyGroup("b"))
	want := []byte{stateVersion, 4,
		kindCounters, 1, 'c', 1, ga, 1, 1, 'a', 10, // varint 5 is 10
		kindMap, 1, 'm', 1, gb, 1, 1, 'b', 2, 'x', 'y'}
	if got := s.AppendSnapshot(nil); string(got) != string(want) {
		t.Fatalf("snapshot %v, want %v", got, want)
	}
	r := NewState(4)
	if err := r.Restore(want); err != nil || r.Counters("c").Get("a") != 5 {
		t.Fatalf("restoring the documented encoding: %v, a = %d", err, r.Counters("c").Get("a"))
	}
}

// TestStateKeysAreCopies: a key taken from a longer string does not keep
// that string alive (its bytes are copied on insert).
func TestStateKeysAreCopies(t *testing.T) {
	line := "the quick brown fox"
	s := NewState(4)
	s.Counters("c").Add(line[4:9], 1)
	s.Map("m").Put(line[10:15], nil)
	for _, keys := range [][]string{counterKeys(s.Counters("c")), mapKeys(s.Map("m"))} {
		for _, k := range keys {
			if p := unsafe.StringData(k); uintptr(unsafe.Pointer(p)) >= uintptr(unsafe.Pointer(unsafe.StringData(line))) &&
				uintptr(unsafe.Pointer(p)) < uintptr(unsafe.Pointer(unsafe.StringData(line)))+uintptr(len(line)) {
				t.Fatalf("key %q shares the bytes of the line it came from", k)
			}
		}
	}
}

func counterKeys(c *Counters) (keys []string) {
	c.Range(func(k string, _ int64) bool { keys = append(keys, k); return true })
	return keys
}

func mapKeys(m *Map) (keys []string) {
	m.Range(func(k string, _ []byte) bool { keys = append(keys, k); return true })
	return keys
}

// TestKeyGroupsByMaskAreTheDivisions: for a power of two of key groups
// KeyGroup and KeyGroupOwner take a mask and a shift; they must give what
// the divisions give, or state restored from a checkpoint would sit in
// other tasks than its keys' records go to.
func TestKeyGroupsByMaskAreTheDivisions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for groups := 1; groups <= 1024; groups++ {
		for range 200 {
			h := r.Uint64()
			g := KeyGroup(h, groups)
			if want := int(h % uint64(groups)); g != want {
				t.Fatalf("KeyGroup(%#x, %d) = %d, want %d", h, groups, g, want)
			}
			p := 1 + r.IntN(groups)
			if got, want := KeyGroupOwner(g, groups, p), g*p/groups; got != want {
				t.Fatalf("KeyGroupOwner(%d, %d, %d) = %d, want %d", g, groups, p, got, want)
			}
		}
	}
}
