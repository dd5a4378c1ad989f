package cluster

// Assign gives each task to a member by rendezvous hashing (highest random
// weight): the member with the largest hash of (topology, task, member).
// A task's member depends only on the set of members, not on their order or
// on the other tasks, so when a member joins only the tasks it now wins
// move to it, and when one leaves only its tasks move. Every process
// computes the same assignment. With no members, it returns an empty map.
func Assign(topology string, tasks []int, members []string) map[int]string {
	assignment := make(map[int]string, len(tasks))
	if len(members) == 0 {
		return assignment
	}
	for _, task := range tasks {
		best, bestWeight := 0, weight(topology, task, members[0])
		for i, m := range members[1:] {
			w := weight(topology, task, m)
			// Ties (of a 64-bit hash) go to the smaller name, so the
			// result does not depend on the order of members.
			if w > bestWeight || w == bestWeight && m < members[best] {
				best, bestWeight = i+1, w
			}
		}
		assignment[task] = members[best]
	}
	return assignment
}

// weight hashes topology, task and member with FNV-1a, the topology's
// length first so that ("ab", "c") and ("a", "bc") differ, then mixes the
// result with SplitMix64's finalizer: FNV alone leaves its high bits
// correlated across members that differ in their last byte ("w1", "w2"),
// which would skew the choice of the largest.
func weight(topology string, task int, member string) uint64 {
	h := uint64(fnvOffset)
	h = fnvUint64(h, uint64(len(topology)))
	h = fnvString(h, topology)
	h = fnvUint64(h, uint64(task))
	h = fnvString(h, member)
	return mix(h)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func fnvUint64(h, v uint64) uint64 {
	for range 8 {
		h = (h ^ v&0xff) * fnvPrime
		v >>= 8
	}
	return h
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
