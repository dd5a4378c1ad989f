package workers

import (
	"math"
	"math/rand/v2"

	"github.com/ackflow/ackflow/topology"
)

// targets appends to dst the tasks that one emit on so goes to. Direct
// routes are skipped unless direct >= 0, in which case only direct routes
// take the record, at index direct of the subscriber.
func targets(dst []int, so *streamOut, values topology.Values, slot int, direct int, rng *rand.Rand) []int {
	for i := range so.routes {
		r := &so.routes[i]
		if direct >= 0 {
			if r.grouping == topology.GroupDirect && direct < len(r.tasks) {
				dst = append(dst, r.tasks[direct])
			}
			continue
		}
		switch r.grouping {
		case topology.GroupShuffle:
			dst = append(dst, r.tasks[rng.IntN(len(r.tasks))])
		case topology.GroupLocalOrShuffle:
			if local := r.byWorker[slot]; len(local) > 0 {
				dst = append(dst, local[rng.IntN(len(local))])
			} else {
				dst = append(dst, r.tasks[rng.IntN(len(r.tasks))])
			}
		case topology.GroupFields:
			h := uint64(14695981039346656037)
			for _, idx := range r.fieldIdx {
				h = hashValue(h, values[idx])
			}
			dst = append(dst, r.tasks[h%uint64(len(r.tasks))])
		case topology.GroupAll:
			dst = append(dst, r.tasks...)
		case topology.GroupGlobal:
			dst = append(dst, r.tasks[0])
		}
	}
	return dst
}

// hashValue folds v into h. It must give equal hashes for equal values on
// every worker, so it hashes bytes, never pointers.
func hashValue(h uint64, v any) uint64 {
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
		return mix64(h ^ uint64(x))
	case int:
		return mix64(h ^ uint64(int64(x)))
	case int32:
		return mix64(h ^ uint64(int64(x)))
	case float64:
		return mix64(h ^ math.Float64bits(x) ^ 0x5555)
	case bool:
		if x {
			return mix64(h ^ 1 ^ 0xb001)
		}
		return mix64(h ^ 0xb001)
	case []any:
		for _, e := range x {
			h = hashValue(h, e)
		}
		return mix64(h ^ uint64(len(x)))
	case nil:
		return mix64(h ^ 0xdead)
	}
	return h
}

func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// valuesSize estimates the bytes a record occupies, for the byte bounds on
// batches and on spout pending records.
func valuesSize(vs []any) int {
	n := 24
	for _, v := range vs {
		switch x := v.(type) {
		case string:
			n += len(x) + 16
		case []byte:
			n += len(x) + 24
		case []any:
			n += valuesSize(x)
		default:
			n += 16
		}
	}
	return n
}
