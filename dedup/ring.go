package dedup

import (
	"math/bits"
	"unsafe"
)

// ring is the exact record of recent completions: a ring of blocks rotated
// like the Bloom generations. The current block takes every completion;
// when it has taken perBlock, the oldest block is emptied and becomes the
// current one. A lookup asks every block (see contains).
//
// The obvious exact FIFO, an array of the last Exact IDs plus one table
// that counts them, puts every push at two random places in tens of
// megabytes: two cache misses for every completed record, which is every
// processed input. A block that is a hash set with open addressing, as the
// ring first was, still puts every push at a random slot of a megabyte,
// and in the running system (two stateful tasks per core, each with its
// Bloom generations and its block, beside the rest of the runtime) that
// load missed the cache: ring.push was the largest single item, 8.5% of the
// CPU profile of word count with dedup, at about 200 ns a push where the
// micro-benchmark alone on a core says 20.
//
// So a block is a bucketed log instead: the ID's hash picks one of the
// block's buckets and the ID is appended at the bucket's end. Only the
// buckets' last cache lines are written, about 140 KB for the default
// config (2,185 buckets), each line filled eight IDs at a time; and emptying a block is
// resetting its fill counts, not clearing a megabyte. Lookups pay instead:
// a lookup scans the ID's bucket in every block, about 32 IDs each for the
// default config, sequentially; they are the rarer operation (Check only
// looks here on a Bloom "maybe").
//
// Nothing is reference-counted or deduplicated: an ID completed again is
// appended again, the copy in an older block is emptied with it, and the
// newer one stays.
type ring struct {
	blocks   []idBlock
	cur      int // blocks[cur] takes inserts
	perBlock int // completions a block takes before the ring rotates
	buckets  int // buckets per block
	room     int // IDs a bucket holds; twice its mean fill
}

// idBlock is a set of buckets laid out one after the other in keys: bucket
// b is keys[b*room : b*room+fill[b]]. An ID that finds its bucket full goes
// to spill. With random IDs that takes a bucket at twice its mean, which
// does not happen in practice (for the default config, 64 where 32 are
// expected); it is there for IDs that repeat many times in one block.
type idBlock struct {
	keys  []uint64
	fill  []uint16
	spill map[uint64]struct{}
	n     int // completions taken since the block was emptied, repeats included
}

// meanFill is how many IDs a bucket takes on average while its block
// fills: a bucket is scanned by every lookup, so it is kept short, and
// there are enough of them that the buckets' ends being written stay in
// cache.
const meanFill = 32

func newRing(cfg Config) ring {
	blocks, perBlock := cfg.exactBlocks()
	buckets := max(1, perBlock/meanFill)
	r := ring{blocks: make([]idBlock, blocks), perBlock: perBlock, buckets: buckets, room: min(2*((perBlock+buckets-1)/buckets), 1<<16-1)}
	r.alloc(&r.blocks[0])
	return r
}

func (r *ring) alloc(b *idBlock) {
	b.keys = make([]uint64, r.buckets*r.room)
	b.fill = make([]uint16, r.buckets)
}

// bucket is the ID's bucket: Fibonacci hashing spreads counters as well as
// hashes over the top bits of the product, and a multiply-high maps those
// onto a number of buckets that is not a power of two.
func (r *ring) bucket(id uint64) int {
	hi, _ := bits.Mul64(id*0x9e3779b97f4a7c15, uint64(r.buckets))
	return int(hi)
}

// push remembers id in the current block. The rotation comes before the
// insert, not after it, so that the ring holds between (blocks-1)*perBlock+1
// and blocks*perBlock completions once it has filled, never fewer: the
// bounds that Config.Exact promises.
func (r *ring) push(id uint64) {
	b := &r.blocks[r.cur]
	if b.n == r.perBlock {
		if r.cur++; r.cur == len(r.blocks) {
			r.cur = 0
		}
		b = &r.blocks[r.cur]
		if b.keys == nil {
			// First use: allocated now, not at New (see New).
			r.alloc(b)
		} else {
			clear(b.fill)
		}
		b.n, b.spill = 0, nil
	}
	b.n++
	k := r.bucket(id)
	if f := int(b.fill[k]); f < r.room {
		b.keys[k*r.room+f] = id
		b.fill[k]++
		return
	}
	if b.spill == nil {
		b.spill = map[uint64]struct{}{}
	}
	b.spill[id] = struct{}{}
}

// contains reports whether any block holds id. The current block comes
// first: its bucket ends are in cache, and a replay that arrives soon after
// its input was trimmed ends the search there. The other blocks' buckets
// are all asked for before the first is scanned: a miss scans every one,
// each a few lines of a different megabyte, and a check waited for them
// one after another (about 1 us for a full ring; BenchmarkCheckHit).
func (r *ring) contains(id uint64) bool {
	k := r.bucket(id)
	if r.blocks[r.cur].has(id, k, r.room) {
		return true
	}
	for j := range r.blocks {
		if b := &r.blocks[j]; j != r.cur && b.keys != nil {
			prefetch(unsafe.Pointer(&b.fill[k]))
			// The lines a bucket fills at the mean; a fuller one's
			// others are read as it is scanned.
			at := k * r.room
			for i := 0; i < min(r.room, meanFill); i += lineWords {
				prefetch(unsafe.Pointer(&b.keys[at+i]))
			}
		}
	}
	for j := range r.blocks {
		if j != r.cur && r.blocks[j].has(id, k, r.room) {
			return true
		}
	}
	return false
}

// has looks for id in bucket k of b, and in its spill.
func (b *idBlock) has(id uint64, k, room int) bool {
	if b.keys == nil {
		return false // not used yet
	}
	at := k * room
	for _, x := range b.keys[at : at+int(b.fill[k])] {
		if x == id {
			return true
		}
	}
	_, ok := b.spill[id]
	return ok
}

// len is the number of completions the ring remembers, repeats included.
func (r *ring) len() int {
	n := 0
	for i := range r.blocks {
		n += r.blocks[i].n
	}
	return n
}
