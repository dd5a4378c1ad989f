package upstreambackup

import (
	"time"

	"github.com/ackflow/ackflow/wire"
)

// Output is one logged output: a record and the task it was sent to.
type Output struct {
	Dst int32       // destination task
	Rec wire.Record // the record as sent (its Anchors are not kept: a re-emit draws new edges)
}

// entry is everything logged for one input. Entries are the unit of
// trimming: an input's outputs are kept or dropped together, because a
// re-emit on a duplicate must reproduce all of them or none.
type entry struct {
	input   uint64
	outs    []Output
	size    int64 // caller's estimate, summed over Appends; subtracted from Log.bytes on removal
	touched int64 // log clock (Unix ns) at the last Append or Link; orders the age list
	// older and newer form the age list, oldest first. An intrusive list
	// rather than a FIFO of IDs because Append and Link move an entry to
	// the newest end, and a FIFO would keep a stale slot for every move.
	older, newer *entry
	// first is embedded because almost every entry belongs to exactly one
	// tree; only the rare entry of several trees allocates more links.
	first link
	// failed marks a tombstone: the input failed (see Discard).
	failed bool
}

// link puts one entry in one tree's list. The list is doubly linked so that
// removing an entry from the lists of its other trees is O(1) however many
// inputs those trees hold (a fan-out tree can put thousands through one task).
type link struct {
	tree       uint64
	e          *entry // nil in an entry's first link while the entry has no tree
	prev, next *link  // the tree's list; prev is nil at the head
	sib        *link  // the entry's next link
}

// Log is the output log of one emitting task. It is not safe for concurrent
// use: the task's goroutine owns it (DESIGN.md section 6: one owner, no
// shared locks on the hot path). Callbacks passed to its methods must not
// call back into the Log.
type Log struct {
	cfg     Config
	entries map[uint64]*entry
	tombs   int              // entries that are tombstones
	trees   map[uint64]*link // head of each tree's list
	oldest  *entry
	newest  *entry
	bytes   int64
	// clock is the latest time passed to Append, in Unix ns. Entry ages are
	// taken from it so that they never decrease along the age list, even if
	// the wall clock steps back, and so that Link, which has no time
	// argument, can still refresh an entry.
	clock int64
	// free holds removed entries for reuse with their output buffers. In
	// steady state every completion frees what the next Append needs, and
	// without reuse those two allocations (about 1 KiB per input of 10
	// outputs) made Append spend most of its time in malloc and the GC.
	free []*entry
}

const (
	// maxFree bounds the entries kept for reuse, so that a burst of
	// removals (a large Expire) leaves at most this many idle: with
	// maxFreeOuts, at most about 6 MiB.
	maxFree = 1024
	// maxFreeOuts is the largest output buffer kept with a free entry, so
	// that one input with huge fan-out does not pin its buffer forever.
	maxFreeOuts = 64
)

// New returns an empty Log bounded by cfg.
func New(cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Log{
		cfg:     cfg,
		entries: make(map[uint64]*entry),
		trees:   make(map[uint64]*link),
	}, nil
}

// Append logs outs for input, which belongs to trees, creating input's entry
// or extending it: outs are added after the ones already logged and trees
// not yet linked are linked. outs may be empty, and the entry still records
// that input was processed, so a duplicate of it is recognised and re-emits
// nothing. size is the caller's estimate of the bytes of outs (negative
// counts as 0); now makes the entry young again for Expire.
//
// Append copies the Output structs, dropping their Anchors, but keeps the
// records' Values and Stream as they are: an emitted record is immutable
// (the runtime delivers the same struct in process), so sharing is safe and
// saves a deep copy per output.
//
// Append never refuses: the bounds are enforced by the caller checking Full
// and pushing back on the spouts, because the inputs already in flight must
// still be logged for the guarantees to hold.
func (l *Log) Append(input uint64, trees []uint64, outs []Output, size int, now time.Time) {
	e := l.take(input, now)
	if e.failed {
		// The replay ran user code again: the failed attempts' trees
		// say nothing about this entry any more.
		l.dropContents(e)
		e.failed = false
		l.tombs--
	}
	e.touched = l.clock
	l.pushAge(e)
	if len(outs) > 0 {
		start := len(e.outs)
		e.outs = append(e.outs, outs...)
		for i := start; i < len(e.outs); i++ {
			e.outs[i].Rec.Anchors = nil
		}
	}
	if size > 0 {
		e.size += int64(size)
		l.bytes += int64(size)
	}
	for _, t := range trees {
		l.link(e, t)
	}
}

// Has reports whether input has an entry that is not a tombstone: the
// exact confirmation that the dedup filter's "maybe seen" answer needs
// (DESIGN.md section 6).
func (l *Log) Has(input uint64) bool {
	e := l.entries[input]
	return e != nil && !e.failed
}

// Discard turns input's entry into a tombstone of the attempt in trees,
// creating one if input has no entry: its outputs and earlier trees are
// dropped, and Has reports false while Failed reports true until input is
// appended to again, removed, completed or expires.
// A bolt calls it when it fails an input: only a completed input is a
// duplicate (DESIGN.md section 6), so the outputs it emitted before failing
// prove nothing, and its replay must run user code again. The tombstone
// lets the bolt tell that replay from a Bloom false positive.
//
// The tombstone stays linked to the failed attempt's trees so that
// Complete removes it when the runtime declares one of them over
// without a replay (a root that went to the dead letters): otherwise
// tombstones of poison inputs, which count toward Full, stayed until
// they expired and stopped the spouts reading meanwhile.
func (l *Log) Discard(input uint64, trees []uint64, now time.Time) {
	e := l.take(input, now)
	l.dropContents(e)
	if !e.failed {
		e.failed = true
		l.tombs++
	}
	e.touched = l.clock
	l.pushAge(e)
	for _, t := range trees {
		l.link(e, t)
	}
}

// Failed reports whether input's entry is a tombstone (see Discard).
func (l *Log) Failed(input uint64) bool {
	e := l.entries[input]
	return e != nil && e.failed
}

// Remove drops input's entry, tombstone or not, and reports whether there
// was one.
func (l *Log) Remove(input uint64) bool {
	e := l.entries[input]
	if e == nil {
		return false
	}
	l.remove(e)
	return true
}

// take advances the clock to now and returns input's entry, created if
// missing, taken out of the age list for the caller to push back.
func (l *Log) take(input uint64, now time.Time) *entry {
	if t := now.UnixNano(); t > l.clock {
		l.clock = t
	}
	e := l.entries[input]
	if e == nil {
		e = l.newEntry(input)
		l.entries[input] = e
	} else {
		l.unlinkAge(e)
	}
	return e
}

// dropContents forgets e's outputs and trees but keeps e in the entry map
// and the age list.
func (l *Log) dropContents(e *entry) {
	if e.first.e != nil {
		for k := &e.first; k != nil; k = k.sib {
			l.unlinkTree(k)
		}
	}
	e.first = link{}
	clear(e.outs)
	e.outs = e.outs[:0]
	l.bytes -= e.size
	e.size = 0
}

// Outputs returns the logged outputs of input in the order they were
// appended, and whether input has an entry at all: an entry with no outputs
// returns nil, true. The slice is the log's: callers must not modify it,
// and must not keep it once the entry may be removed, because the log reuses
// the memory of removed entries. Later Appends to input do not change what it
// shows.
func (l *Log) Outputs(input uint64) ([]Output, bool) {
	e := l.entries[input]
	if e == nil || e.failed {
		return nil, false
	}
	if len(e.outs) == 0 {
		return nil, true // a reused entry has an empty buffer, not nil
	}
	// Capping the capacity makes a caller's append copy instead of writing
	// into the log's spare room.
	return e.outs[:len(e.outs):len(e.outs)], true
}

// Link associates input's entry with one more tree (a replay re-emitted its
// outputs in a new tree) and makes the entry young again, as of the latest
// time given to Append; it is a no-op if input has no entry. The refresh
// keeps Expire from dropping an entry whose outputs are in flight again.
func (l *Log) Link(input uint64, tree uint64) {
	e := l.entries[input]
	if e == nil {
		return
	}
	l.unlinkAge(e)
	e.touched = l.clock
	l.pushAge(e)
	l.link(e, tree)
}

// Complete removes every entry linked to tree, calls trimmed (if not nil)
// with the input of each, in no particular order, and returns how many were
// removed. An entry linked to several trees goes as soon as any one of them
// completes: a completed tree proves the entry's outputs were fully processed
// downstream, so no task needs them re-emitted any more. A tombstone linked
// to tree goes too, without trimmed: its input failed, so nothing about it
// may be remembered as done. An unknown tree is a no-op.
func (l *Log) Complete(tree uint64, trimmed func(input uint64)) int {
	n := 0
	for k := l.trees[tree]; k != nil; {
		// remove unlinks k from this list but leaves k.next alone, and an
		// entry is in a tree's list at most once, so next stays valid.
		next := k.next
		input, failed := k.e.input, k.e.failed
		l.remove(k.e)
		if trimmed != nil && !failed {
			trimmed(input)
		}
		n++
		k = next
	}
	return n
}

// Expire removes the entries last appended to or linked before cutoff,
// oldest first, calls trimmed (if not nil) with the input of each and the
// number of outputs it held, and returns how many were removed. Tombstones
// are removed and counted without calling trimmed: a failed input was not
// processed, so nothing about it may be remembered as done. The count
// lets the caller treat an entry with nothing to re-emit differently: it
// can be remembered as done, while one with outputs cannot (a later replay
// would then be acked without its outputs ever being sent again). It catches entries whose trees failed and were
// never replayed, or whose completion notice was lost; the age list is
// ordered, so Expire costs only what it removes.
func (l *Log) Expire(cutoff time.Time, trimmed func(input uint64, outputs int)) int {
	c := cutoff.UnixNano()
	n := 0
	for e := l.oldest; e != nil && e.touched < c; e = l.oldest {
		input, outputs, failed := e.input, len(e.outs), e.failed
		l.remove(e)
		if trimmed != nil && !failed {
			trimmed(input, outputs)
		}
		n++
	}
	return n
}

// ForTask calls fn for every logged output addressed to dst, least recently
// appended or linked entry first and in append order within an entry, so a
// new owner of dst receives the records it missed roughly in their original
// order (DESIGN.md section 5). It walks the whole log: it runs when a task
// changes owner, not per record.
func (l *Log) ForTask(dst int32, fn func(input uint64, o Output)) {
	for e := l.oldest; e != nil; e = e.newer {
		for i := range e.outs {
			if e.outs[i].Dst == dst {
				fn(e.input, e.outs[i])
			}
		}
	}
}

// Len is the number of inputs logged, tombstones excluded.
func (l *Log) Len() int { return len(l.entries) - l.tombs }

// Tombstones is the number of tombstones (see Discard).
func (l *Log) Tombstones() int { return l.tombs }

// Bytes is the sum of the sizes given to Append for the entries still
// logged.
func (l *Log) Bytes() int64 { return l.bytes }

// Full reports whether either bound is reached (tombstones count toward
// MaxEntries). The runtime then stops the
// spouts reading their sources (DESIGN.md section 4, flow control) rather
// than dropping entries, which would lose the records a replay needs.
func (l *Log) Full() bool {
	return len(l.entries) >= l.cfg.MaxEntries || l.bytes >= l.cfg.MaxBytes
}

// link adds tree to e's trees unless it is there already.
func (l *Log) link(e *entry, tree uint64) {
	var k *link
	if e.first.e == nil {
		e.first = link{tree: tree, e: e}
		k = &e.first
	} else {
		for s := &e.first; s != nil; s = s.sib {
			if s.tree == tree {
				return
			}
		}
		k = &link{tree: tree, e: e, sib: e.first.sib}
		e.first.sib = k
	}
	if h := l.trees[tree]; h != nil {
		k.next = h
		h.prev = k
	}
	l.trees[tree] = k
}

// remove drops e from the entry map, the age list and every tree's list,
// and keeps it for reuse if there is room.
func (l *Log) remove(e *entry) {
	if e.first.e != nil {
		for k := &e.first; k != nil; k = k.sib {
			l.unlinkTree(k)
		}
	}
	l.unlinkAge(e)
	delete(l.entries, e.input)
	if e.failed {
		l.tombs--
	}
	l.bytes -= e.size
	if len(l.free) == maxFree {
		return
	}
	outs := e.outs
	if cap(outs) > maxFreeOuts {
		outs = nil
	}
	// Clearing drops the references to the records' Values and Streams, so
	// an idle entry keeps no user data alive.
	clear(outs)
	*e = entry{outs: outs[:0]}
	l.free = append(l.free, e)
}

func (l *Log) newEntry(input uint64) *entry {
	n := len(l.free)
	if n == 0 {
		return &entry{input: input}
	}
	e := l.free[n-1]
	l.free[n-1] = nil
	l.free = l.free[:n-1]
	e.input = input
	return e
}

func (l *Log) unlinkTree(k *link) {
	switch {
	case k.prev != nil:
		k.prev.next = k.next
	case k.next != nil:
		l.trees[k.tree] = k.next
	default:
		delete(l.trees, k.tree)
	}
	if k.next != nil {
		k.next.prev = k.prev
	}
}

func (l *Log) unlinkAge(e *entry) {
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		l.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		l.newest = e.older
	}
	e.older, e.newer = nil, nil
}

func (l *Log) pushAge(e *entry) {
	e.older = l.newest
	if l.newest != nil {
		l.newest.newer = e
	} else {
		l.oldest = e
	}
	l.newest = e
}
