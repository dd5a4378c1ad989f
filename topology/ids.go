package topology

// Record IDs are deterministic (DESIGN.md section 3): a root's ID follows
// from its component, stream and source position, and a child's from its
// parent's ID, the emitting component, task index and stream, and its output
// index. A replay therefore reproduces every ID, which is what lets receivers
// recognise duplicates. The task index is part of a child's ID because one
// record can reach several tasks of a component (All grouping), and each
// copy's children are different records: without it, a stateful bolt
// downstream would drop all copies but one as duplicates.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// HashString is 64-bit FNV-1a of s: stable across processes and versions.
func HashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix is splitmix64's finaliser: a bijection that spreads every input bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// RootID is the record ID of the spout record at position id of component,
// emitted on stream: the same position emitted on two streams is two records.
func RootID(component, stream string, id MsgID) uint64 {
	return mix(StreamKey(component, stream) ^ mix(uint64(uint32(id.Partition))<<32^0x9e3779b97f4a7c15) ^ mix(uint64(id.Offset)))
}

// StreamKey precomputes the component/stream part of RootID and ChildID.
func StreamKey(component, stream string) uint64 {
	return mix(HashString(component) ^ mix(HashString(stream)))
}

// TaskKey precomputes the component/task/stream part of ChildID for the
// task with index task (0..parallelism-1) of the component whose StreamKey
// for the stream is key.
func TaskKey(key uint64, task int) uint64 {
	return mix(key ^ mix(uint64(task)+0x632be59bd9b4e019))
}

// ChildID is the ID of the k-th output (k from 0) emitted while processing
// the record parent, by the task and on the stream whose TaskKey is key.
func ChildID(parent, key uint64, k int) uint64 {
	return mix(parent ^ mix(key^uint64(k)*0x9e3779b97f4a7c15))
}

// HashID makes an explicit record ID from parts, for EmitWithID.
func HashID(parts ...string) uint64 {
	h := uint64(fnvOffset)
	for _, p := range parts {
		h = mix(h ^ HashString(p))
	}
	return h
}
