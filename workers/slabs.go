package workers

import (
	"sync"

	"github.com/ackflow/ackflow/wire"
)

// The record arrays of data frames are recycled. A full frame's array is
// 512 records of 88 bytes, a large allocation that the runtime zeroes
// page by page, and word count made one per frame sent and one per frame
// received over NATS (memclr of large allocations was 5% of its CPU). An
// array goes back to the pool, cleared, once nothing can read it: when the
// receiving task has processed its frame, or when the sender has encoded
// and published it. Tuples copy what they need out of a record (the
// Values and Anchors slices they point to are never reused: clearing the
// records drops them), so a tuple a bolt keeps is not affected. Under
// chaos a frame may be duplicated, held or kept for resending by pointer,
// so nothing is recycled then.
var recordSlabs sync.Pool // of *[]wire.Record, cleared, length 0

// getRecords returns an empty record array with room for at least n.
func getRecords(n int) []wire.Record {
	if p, ok := recordSlabs.Get().(*[]wire.Record); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]wire.Record, 0, n)
}

// putRecords clears recs and gives its array back; the caller must not
// use recs again.
func putRecords(recs []wire.Record) {
	if cap(recs) == 0 {
		return
	}
	clear(recs)
	recs = recs[:0]
	recordSlabs.Put(&recs)
}
