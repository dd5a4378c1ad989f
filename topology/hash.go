package topology

import (
	"math"
	"math/bits"
	"sort"
)

// HashSeed starts a fold of HashValue over the fields of a key.
const HashSeed uint64 = 14695981039346656037

// HashValue folds v into h. Fields grouping and key groups both use it, so
// equal values give equal hashes on every worker: it hashes bytes, never
// pointers, and map entries in key order. v must be in the value set
// (Values), as Emit leaves it.
func HashValue(h uint64, v any) uint64 {
	const prime = 1099511628211
	switch x := v.(type) {
	case string:
		for i := 0; i < len(x); i++ {
			h = (h ^ uint64(x[i])) * prime
		}
		return (h ^ 0xff) * prime
	case []byte:
		for _, c := range x {
			h = (h ^ uint64(c)) * prime
		}
		return (h ^ 0xfe) * prime
	case int64:
		return mix(h ^ uint64(x))
	case uint64:
		return mix(h ^ x ^ 0x7777)
	case float64:
		return mix(h ^ math.Float64bits(x) ^ 0x5555)
	case bool:
		if x {
			return mix(h ^ 1 ^ 0xb001)
		}
		return mix(h ^ 0xb001)
	case []any:
		for _, e := range x {
			h = HashValue(h, e)
		}
		return mix(h ^ uint64(len(x)))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			h = HashValue(HashValue(h, k), x[k])
		}
		return mix(h ^ uint64(len(x)) ^ 0x3333)
	case nil:
		return mix(h ^ 0xdead)
	}
	return h
}

// DefaultKeyGroups is the number of key groups of a topology unless
// Builder.KeyGroups sets another; it bounds the parallelism of a component
// that keeps keyed state or is fed by Fields grouping.
const DefaultKeyGroups = 128

// KeyGroup returns the key group of a hash from a fold of HashValue: keys
// hash into a fixed number of key groups, and key groups map to tasks by
// contiguous ranges (Flink's model), so that state can later move between
// tasks a key group at a time. A power of two of groups, the default's
// 128, takes a mask instead of a division (the same group): the divisions
// of KeyGroup and KeyGroupOwner were a sixtieth of word count's CPU time.
func KeyGroup(hash uint64, groups int) int {
	if groups > 0 && groups&(groups-1) == 0 {
		return int(hash & uint64(groups-1))
	}
	return int(hash % uint64(groups))
}

// KeyGroupOwner returns the index of the task, of parallelism p, that owns
// key group g of groups.
func KeyGroupOwner(g, groups, p int) int {
	if groups > 0 && groups&(groups-1) == 0 {
		return g * p >> bits.TrailingZeros(uint(groups))
	}
	return g * p / groups
}

// KeyGroupRange returns the key groups [from, to) that task index of
// parallelism p owns.
func KeyGroupRange(groups, p, index int) (from, to int) {
	return (index*groups + p - 1) / p, ((index+1)*groups + p - 1) / p
}
