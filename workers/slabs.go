package workers

import (
	"sync"

	"github.com/ackflow/ackflow/wire"
)

// The item arrays of frames are recycled. A full data frame's array is 512
// records of 88 bytes, a full ack frame's 2,048 acker messages of 48 bytes:
// large allocations that the runtime zeroes page by page, and word count
// made one per frame sent and one per frame received over NATS (memclr of
// large allocations was 5% of its CPU for records, and 4% again for acks
// and notices once records were recycled). An array goes back to its slab,
// cleared, once nothing can read it: when the receiving task has processed
// its frame, or when the sender has encoded and published it. Tuples copy
// what they need out of a record (the Values and Anchors slices they point
// to are never reused: clearing the records drops them), so a tuple a bolt
// keeps is not affected. Under chaos a frame may be duplicated, held or
// kept for resending by pointer, so nothing is recycled then.
var (
	recordSlabs slab[wire.Record]
	ackSlabs    slab[wire.AckMsg]
	noticeSlabs slab[wire.Notice]
)

// slab is a pool of cleared, empty arrays of T.
type slab[T any] struct{ pool sync.Pool }

// get returns an empty array with room for at least n.
func (s *slab[T]) get(n int) []T {
	if p, ok := s.pool.Get().(*[]T); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]T, 0, n)
}

// put clears xs and gives its array back; the caller must not use xs
// again.
func (s *slab[T]) put(xs []T) {
	if cap(xs) == 0 {
		return
	}
	clear(xs)
	xs = xs[:0]
	s.pool.Put(&xs)
}

// recycle gives the item arrays of a frame nothing reads any more back to
// their slabs, unless chaos may still hold the frame.
func (r *run) recycle(f *wire.Frame) {
	if r.cfg.Chaos.Enabled() {
		return
	}
	recordSlabs.put(f.Records)
	ackSlabs.put(f.Acks)
	noticeSlabs.put(f.Notices)
	f.Records, f.Acks, f.Notices = nil, nil, nil
}
