package topology

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"sort"
	"strings"
)

// State is a task's keyed state: named collections of values by string
// key, which the runtime snapshots at every checkpoint and restores after a
// failure. A bolt gets it from TaskContext.State when its component
// declares KeyedState(); the bolt is then stateful (dedup, checkpoints).
//
// Keys hash into key groups as Fields grouping hashes a record whose one
// grouping field holds the key, and snapshots are kept by key group: state
// keyed by the string value of a bolt's single Fields grouping field lives in
// the task that gets that key's records, and can move with them when the
// parallelism changes. Like the bolt, a State is used by one goroutine.
type State struct {
	groups   int
	counters map[string]*Counters
	maps     map[string]*Map
}

// NewState returns an empty State over groups key groups (the runtime makes
// one per task; tests of a bolt may make their own).
func NewState(groups int) *State {
	if groups < 1 {
		groups = DefaultKeyGroups
	}
	return &State{groups: groups, counters: map[string]*Counters{}, maps: map[string]*Map{}}
}

// KeyGroup returns the key group of key.
func (s *State) KeyGroup(key string) int { return KeyGroup(HashValue(HashSeed, key), s.groups) }

// Counters returns the int64 counters called name, made empty on first use.
func (s *State) Counters(name string) *Counters {
	c := s.counters[name]
	if c == nil {
		c = newCounters()
		s.counters[name] = c
	}
	return c
}

// Map returns the byte values called name, made empty on first use.
func (s *State) Map(name string) *Map {
	m := s.maps[name]
	if m == nil {
		m = &Map{m: map[string][]byte{}}
		s.maps[name] = m
	}
	return m
}

// Map holds byte values by key. Put keeps the slice it is given: do not
// change it afterwards.
type Map struct {
	m map[string][]byte
}

// Get returns key's value and whether there is one.
func (m *Map) Get(key string) ([]byte, bool) {
	v, ok := m.m[key]
	return v, ok
}

// Put sets key's value.
func (m *Map) Put(key string, value []byte) {
	if _, ok := m.m[key]; ok {
		m.m[key] = value
		return
	}
	m.m[strings.Clone(key)] = value
}

// Delete removes key.
func (m *Map) Delete(key string) { delete(m.m, key) }

// Len is the number of keys.
func (m *Map) Len() int { return len(m.m) }

// Range calls fn for every key until fn returns false, in no order.
func (m *Map) Range(fn func(key string, value []byte) bool) {
	for k, v := range m.m {
		if !fn(k, v) {
			return
		}
	}
}

// Snapshot encoding, version 1: the version byte, the key group count,
// then each collection: a kind byte (kindCounters, kindMap), its name, and
// per non-empty key group the group, its entry count and the entries.
// Keeping entries by key group is what will let state move a key group at a
// time.
const (
	stateVersion = 1
	kindCounters = 1
	kindMap      = 2
)

// ErrStateSnapshot wraps every error Restore returns.
var ErrStateSnapshot = errors.New("topology: keyed state snapshot")

// AppendSnapshot appends an encoding of the state to dst: a copy, so the
// runtime can write it while the task goes on.
func (s *State) AppendSnapshot(dst []byte) []byte {
	dst = append(dst, stateVersion)
	dst = binary.AppendUvarint(dst, uint64(s.groups))
	for _, name := range sortedKeys(s.counters) {
		c := s.counters[name]
		dst = appendCollection(dst, kindCounters, name, byGroup(s, c.keys), c.appendEntry)
	}
	for _, name := range sortedKeys(s.maps) {
		m := s.maps[name]
		dst = appendCollection(dst, kindMap, name, byGroup(s, maps.Keys(m.m)), func(dst []byte, k string) []byte {
			return appendString(appendString(dst, k), string(m.m[k]))
		})
	}
	return dst
}

// byGroup returns keys by key group.
func byGroup(s *State, keys iter.Seq[string]) [][]string {
	groups := make([][]string, s.groups)
	for k := range keys {
		g := s.KeyGroup(k)
		groups[g] = append(groups[g], k)
	}
	return groups
}

// appendCollection appends one collection: its kind, name and number of
// non-empty key groups, then per such group the group, its entry count and
// its entries, each appended by entry.
func appendCollection(dst []byte, kind byte, name string, groups [][]string, entry func(dst []byte, key string) []byte) []byte {
	dst = append(dst, kind)
	dst = appendString(dst, name)
	n := 0
	for _, keys := range groups {
		if len(keys) > 0 {
			n++
		}
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for g, keys := range groups {
		if len(keys) == 0 {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(g))
		dst = binary.AppendUvarint(dst, uint64(len(keys)))
		for _, k := range keys {
			dst = entry(dst, k)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Restore replaces the state with a snapshot's. Handles from Counters and
// Map taken before stay valid (a bolt takes them in Prepare, and the
// runtime restores after Prepare). A snapshot of another key group count,
// or one that does not decode, is refused with an error wrapping
// ErrStateSnapshot and the state is left empty.
func (s *State) Restore(snap []byte) error {
	fresh := NewState(s.groups)
	err := fresh.decode(snap)
	if err != nil {
		fresh = NewState(s.groups)
	}
	for name, c := range s.counters {
		if f := fresh.counters[name]; f != nil {
			*c = *f
		} else {
			*c = *newCounters()
		}
	}
	for name, f := range fresh.counters {
		if s.counters[name] == nil {
			s.counters[name] = f
		}
	}
	for name, m := range s.maps {
		if f := fresh.maps[name]; f != nil {
			m.m = f.m
		} else {
			m.m = map[string][]byte{}
		}
	}
	for name, f := range fresh.maps {
		if s.maps[name] == nil {
			s.maps[name] = f
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStateSnapshot, err)
	}
	return nil
}

// RestoreGroups replaces the state with the entries of key groups [from,
// to) gathered from several snapshots: the state of a task after the
// parallelism changed, made from the tasks that held its key groups before.
func (s *State) RestoreGroups(snaps [][]byte, from, to int) error {
	merged := NewState(s.groups)
	for i, snap := range snaps {
		one := NewState(s.groups)
		if err := one.decode(snap); err != nil {
			return fmt.Errorf("%w: snapshot %d: %w", ErrStateSnapshot, i, err)
		}
		in := func(k string) bool { g := s.KeyGroup(k); return g >= from && g < to }
		for name, c := range one.counters {
			c.Range(func(k string, v int64) bool {
				if in(k) {
					merged.Counters(name).Add(k, v)
				}
				return true
			})
		}
		for name, m := range one.maps {
			for k, v := range m.m {
				if in(k) {
					merged.Map(name).Put(k, v)
				}
			}
		}
	}
	return s.Restore(merged.AppendSnapshot(nil))
}

func (s *State) decode(b []byte) error {
	r := reader{b: b}
	if v := r.byte(); v != stateVersion {
		return fmt.Errorf("version %d, this build reads %d", v, stateVersion)
	}
	if g := r.uvarint(); r.err == nil && g != uint64(s.groups) {
		return fmt.Errorf("taken with %d key groups, the topology has %d; restore with the same key groups", g, s.groups)
	}
	for r.err == nil && len(r.b) > 0 {
		kind, name, n := r.byte(), r.string(), r.uvarint()
		for i := uint64(0); i < n && r.err == nil; i++ {
			g, count := r.uvarint(), r.uvarint()
			if r.err == nil && g >= uint64(s.groups) {
				return fmt.Errorf("key group %d of %q is out of range", g, name)
			}
			if r.err == nil && count > uint64(len(r.b)) {
				return fmt.Errorf("key group %d of %q claims %d entries in %d bytes", g, name, count, len(r.b))
			}
			for j := uint64(0); j < count && r.err == nil; j++ {
				key := r.string()
				switch kind {
				case kindCounters:
					s.Counters(name).Add(key, r.varint())
				case kindMap:
					s.Map(name).Put(key, []byte(r.string()))
				default:
					return fmt.Errorf("unknown collection kind %d", kind)
				}
			}
		}
	}
	return r.err
}

// reader decodes a snapshot, noting the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() { r.err = errors.New("truncated") }

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
