package acker

import (
	"encoding/binary"
	"time"

	"github.com/ackflow/ackflow/wire"
)

// NoSpout is Verdict.SpoutTask when the tree's INIT has not been seen.
const NoSpout int32 = -1

// Verdict is what the runtime must tell other tasks about one tree.
type Verdict struct {
	Type wire.NoticeType // wire.NoticeComplete or wire.NoticeFailed
	Tree uint64
	// SpoutTask is the spout task from the tree's INIT, or NoSpout when a
	// FAIL overtook the INIT. Such a tree gets a second NoticeFailed verdict,
	// naming the spout, when its INIT arrives.
	SpoutTask int32
	// Holders has bit (task mod 64) set for every task that registered log
	// entries for the tree by an ACK with Task >= 0. A NoSpout verdict clears
	// the bits, so the second verdict names only holders that registered
	// since.
	Holders uint64
	// For NoticeFailed: the task that failed the tree (NoTask when unknown
	// or timed out) and why, for the dead letters.
	Failer int32
	Err    string
}

// NoTask is Verdict.Failer when no task failed the tree (it timed out).
const NoTask int32 = -1

// ErrTimedOut is Verdict.Err of a tree that expired in the acker.
const ErrTimedOut = "timed out in the acker"

// Tracker holds the pending trees of one acker task. It is not safe for
// concurrent use: one goroutine owns it.
//
// Trees live in rotating buckets, newest first. A new tree goes into the
// newest bucket, Tick drops the oldest, and a lookup checks the buckets from
// the newest. A message for a tree found in an older bucket updates it in
// place instead of moving it to the newest as Storm's RotatingMap does: that
// keeps an ACK to one lookup and one store, and makes the timeout count from
// the tree's first message rather than its last, so a tree that keeps getting
// ACKs without completing still expires. A spout that wants more time sends
// RESET, which does move the tree.
type Tracker struct {
	buckets   []map[treeKey]packedEntry // newest first
	bigSpouts map[uint64]int32          // spout tasks that do not fit in entry.state, by tree
	// early holds who failed a tree and why when the FAIL came before the
	// INIT, until the INIT or expiry: rare, so a side map keeps entries small.
	early map[uint64]failure
	every time.Duration
}

// New returns an empty Tracker, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{
		buckets:   make([]map[treeKey]packedEntry, cfg.Buckets),
		bigSpouts: make(map[uint64]int32),
		early:     make(map[uint64]failure),
		every:     cfg.rotateEvery(),
	}
	for i := range t.buckets {
		t.buckets[i] = make(map[treeKey]packedEntry)
	}
	return t, nil
}

// RotateEvery is the period at which the owner must call Tick:
// Timeout/(Buckets-1).
func (t *Tracker) RotateEvery() time.Duration { return t.every }

// Pending is the number of trees held: INITed trees that have not completed,
// failed or expired, plus trees seen only through ACKs or an early FAIL.
func (t *Tracker) Pending() int {
	n := 0
	for _, b := range t.buckets {
		n += len(b)
	}
	return n
}

// Handle applies one message and appends any verdict it produces to out.
//
//   - INIT XORs Val into the tree and records Task as its spout; the tree
//     completes if its value is then 0. If a FAIL came first, the INIT yields
//     NoticeFailed at once. A second INIT for a tree (a duplicate, which is
//     out of contract) XORs its value and keeps the first spout task.
//   - ACK XORs Val into the tree and registers Task as a holder if Task >= 0;
//     the tree completes if its INIT has been seen and its value is 0.
//   - FAIL yields NoticeFailed and forgets the tree. Before the INIT it
//     yields a NoSpout verdict for the holders and remembers the tree as
//     failed, so that the INIT yields NoticeFailed for the spout.
//   - RESET moves the tree to the newest bucket, restarting its timeout, and
//     for an INITed tree yields NoticeReset for the spout, whose own timer
//     must restart too. A RESET for an unknown tree is ignored: there is
//     nothing to time out.
//
// Messages of an unknown type are ignored; the wire decoder refuses them.
func (t *Tracker) Handle(m wire.AckMsg, out []Verdict) []Verdict {
	k := keyOf(m.Tree)
	i, e := t.find(k)
	switch m.Type {
	case wire.AckInit:
		switch e.state {
		case stateFailed:
			delete(t.buckets[i], k)
			f := t.early[m.Tree]
			delete(t.early, m.Tree)
			return append(out, Verdict{Type: wire.NoticeFailed, Tree: m.Tree, SpoutTask: m.Task, Holders: e.holders, Failer: f.task, Err: f.err})
		case stateNoInit:
			e.state = t.putSpout(m.Tree, m.Task)
		}
		e.val ^= m.Val
		return t.settle(i, k, m.Tree, e, out)
	case wire.AckAck:
		e.val ^= m.Val
		if m.Task >= 0 {
			e.holders |= 1 << (uint32(m.Task) % 64)
		}
		return t.settle(i, k, m.Tree, e, out)
	case wire.AckFail:
		if e.inited() {
			delete(t.buckets[i], k)
			return append(out, Verdict{Type: wire.NoticeFailed, Tree: m.Tree, SpoutTask: t.takeSpout(m.Tree, e.state), Holders: e.holders, Failer: m.Task, Err: m.Err})
		}
		// Tell the holders now; the spout hears when its INIT arrives.
		v := Verdict{Type: wire.NoticeFailed, Tree: m.Tree, SpoutTask: NoSpout, Holders: e.holders, Failer: m.Task, Err: m.Err}
		if e.state != stateFailed {
			t.early[m.Tree] = failure{task: m.Task, err: m.Err}
		}
		e.holders = 0
		e.state = stateFailed
		store(t.buckets[i], k, e)
		return append(out, v)
	case wire.AckReset:
		if i > 0 {
			delete(t.buckets[i], k)
			store(t.buckets[0], k, e)
		}
		if e.inited() {
			// The spout keeps its own timer for the tree; it must hear too.
			return append(out, Verdict{Type: wire.NoticeReset, Tree: m.Tree, SpoutTask: t.spoutOf(m.Tree, e.state)})
		}
	}
	return out
}

// spoutOf returns the spout task of an INITed tree that stays pending.
func (t *Tracker) spoutOf(tree uint64, state uint16) int32 {
	if state != stateBigSpout {
		return int32(state - spoutBase)
	}
	return t.bigSpouts[tree]
}

// find returns the index of the bucket holding k and its entry. For a tree
// not held it returns the newest bucket, where a new tree goes, and the zero
// entry. A zero entry (no INIT, value 0, no holders) carries no information,
// so the maps never hold one (see settle) and a zero value read means "not
// held": that saves the comma-ok lookup, whose extra copy of the packed value
// costs a store-forwarding stall.
func (t *Tracker) find(k treeKey) (int, entry) {
	for i, b := range t.buckets {
		if p := b[k]; p != (packedEntry{}) {
			return i, p.unpack()
		}
	}
	return 0, entry{}
}

// settle stores e in bucket i, or forgets the tree: with NoticeComplete when
// its INIT has been seen and its value is 0, silently when it is zero.
func (t *Tracker) settle(i int, k treeKey, tree uint64, e entry, out []Verdict) []Verdict {
	switch {
	case e.inited() && e.val == 0:
		delete(t.buckets[i], k)
		return append(out, Verdict{Type: wire.NoticeComplete, Tree: tree, SpoutTask: t.takeSpout(tree, e.state), Holders: e.holders})
	case e == entry{}:
		delete(t.buckets[i], k)
	default:
		store(t.buckets[i], k, e)
	}
	return out
}

// putSpout returns the entry state for a tree INITed by spout task.
func (t *Tracker) putSpout(tree uint64, task int32) uint16 {
	if task >= 0 && task <= maxInlineSpout {
		return uint16(task) + spoutBase
	}
	t.bigSpouts[tree] = task
	return stateBigSpout
}

// takeSpout returns the spout task of an INITed tree being forgotten.
func (t *Tracker) takeSpout(tree uint64, state uint16) int32 {
	if state != stateBigSpout {
		return int32(state - spoutBase)
	}
	task := t.bigSpouts[tree]
	delete(t.bigSpouts, tree)
	return task
}

// Tick drops the oldest bucket and appends a NoticeFailed verdict for every
// tree in it whose INIT was seen. Trees never INITed expire silently: their
// spout has timed them out already, or they are stragglers of a finished
// attempt. The owner must call Tick every RotateEvery.
func (t *Tracker) Tick(out []Verdict) []Verdict {
	n := len(t.buckets)
	expired := t.buckets[n-1]
	copy(t.buckets[1:], t.buckets[:n-1])
	// A fresh map rather than clear(expired): Go maps never shrink, so
	// reusing one would keep the memory of a burst of pending trees forever.
	t.buckets[0] = make(map[treeKey]packedEntry)
	for k, p := range expired {
		e := p.unpack()
		if !e.inited() {
			if e.state == stateFailed {
				delete(t.early, k.tree())
			}
			continue
		}
		tree := k.tree()
		out = append(out, Verdict{Type: wire.NoticeFailed, Tree: tree, SpoutTask: t.takeSpout(tree, e.state), Holders: e.holders, Failer: NoTask, Err: ErrTimedOut})
	}
	return out
}

// failure is who failed a tree and why.
type failure struct {
	task int32
	err  string
}

// treeKey is a tree ID kept as bytes so that map slots are 2-byte aligned;
// see packedEntry.
type treeKey [8]byte

func keyOf(tree uint64) treeKey {
	var k treeKey
	binary.LittleEndian.PutUint64(k[:], tree)
	return k
}

func (k treeKey) tree() uint64 { return binary.LittleEndian.Uint64(k[:]) }

// entry is the state of one pending tree as Handle works on it; it fits in
// registers. The maps hold it as a packedEntry.
type entry struct {
	val     uint64 // XOR of the values of every INIT and ACK applied
	holders uint64 // bit task%64 of every task that registered log entries
	state   uint16 // stateNoInit, stateFailed, stateBigSpout or spoutBase+spout task
}

func (e entry) inited() bool { return e.state >= spoutBase }

// Values of entry.state. The spout task is folded into the state so that no
// flag byte is needed.
const (
	stateNoInit   uint16 = 0      // ACKs seen, INIT not yet
	stateFailed   uint16 = 1      // FAIL seen before INIT: the INIT yields NoticeFailed
	spoutBase     uint16 = 2      // INIT seen; spout task = state - spoutBase
	stateBigSpout uint16 = 0xFFFF // INIT seen; spout task in Tracker.bigSpouts

	// maxInlineSpout is the largest spout task kept in entry.state. Task IDs
	// are numbered from 0 per topology, so bigSpouts stays empty in practice;
	// it exists so that any int32 is reported exactly.
	maxInlineSpout = int32(stateBigSpout - 1 - spoutBase)
)

// packedEntry is an entry as the maps store it: 18 bytes with 2-byte
// alignment, so that a map slot (key plus value) takes 26 bytes instead of
// the 32 of a uint64 key with a naturally aligned 24-byte value. A Go map
// allocates its tables in 1024-slot blocks rounded up to the allocator's size
// classes, and the difference measured 59 against 84 bytes per pending tree
// at 1e6 trees (BenchmarkMemoryPerPendingTree, Go 1.26, amd64).
//
// The compiler copies an 18-byte value with two overlapping 16-byte moves,
// and a load that spans two recent stores cannot be forwarded from them: the
// CPU stalls until they reach the cache. So state comes first, which puts
// val and holders wholly inside the second move; find reads the fields right
// after the one copy out of the map; and store fills a packedEntry field by
// field before the map assignment, whose call gives those stores time to land
// before they are copied into the slot. With that, BenchmarkHandle is as
// fast as with the plain layout (faster at 1e6 pending trees, where the
// smaller tables miss the cache less); passing packed values around instead
// made it about twice as slow.
type packedEntry struct {
	state   uint16
	val     [8]byte // little-endian
	holders [8]byte // little-endian
}

func (p *packedEntry) unpack() entry {
	return entry{
		val:     binary.LittleEndian.Uint64(p.val[:]),
		holders: binary.LittleEndian.Uint64(p.holders[:]),
		state:   p.state,
	}
}

// store puts e into bucket b; e must not be the zero entry (see find).
func store(b map[treeKey]packedEntry, k treeKey, e entry) {
	var p packedEntry
	p.state = e.state
	binary.LittleEndian.PutUint64(p.val[:], e.val)
	binary.LittleEndian.PutUint64(p.holders[:], e.holders)
	b[k] = p
}
