package dedup

import "math/bits"

// ring is the exact record of recent completions: a ring of blocks, each a
// small open-addressing hash set, rotated like the Bloom generations. The
// current block takes every completion; when it has taken perBlock, the
// oldest block is cleared and becomes the current one. A lookup asks the
// current block, then all the others at once (see contains).
//
// The obvious exact FIFO, an array of the last Exact IDs plus one table
// that counts them, puts every push at two random places in tens of
// megabytes, to remove the oldest ID and insert the new one: two cache
// misses for every completed record, which is every processed input, and
// the biggest item in a CPU profile of word count. Here a push touches only the
// current block, about a megabyte for the default config, which stays in
// L2 while it fills, and forgetting is one sequential memclr per perBlock
// pushes. Lookups pay instead, since a miss probes every block; they are
// the rarer operation (Check only looks here on a Bloom "maybe").
//
// Nothing is reference-counted: an ID completed again while an older copy
// sits in an older block simply has two copies, and the clear of the older
// block leaves the newer one.
type ring struct {
	blocks   []idBlock
	cur      int // blocks[cur] takes inserts
	perBlock int // completions a block takes before the ring rotates
}

// idBlock is a set of IDs with linear probing. Its table has 2*perBlock
// slots, so it is at most half full and a miss ends within a few slots. All
// blocks have the same size, so an ID has the same home slot in each.
type idBlock struct {
	keys    []uint64 // 0 marks an empty slot, so ID 0 lives in hasZero
	hasZero bool
	n       int // completions taken since the last clear, repeats included
}

func newRing(cfg Config) ring {
	blocks, perBlock := cfg.exactBlocks()
	r := ring{blocks: make([]idBlock, blocks), perBlock: perBlock}
	r.blocks[0].keys = make([]uint64, 2*perBlock)
	return r
}

// home is the ID's preferred slot: Fibonacci hashing spreads counters as
// well as hashes over the top bits of the product, and a multiply-high maps
// those onto a table whose size is not a power of two (a power of two would
// double a block's memory at the default size).
func (r *ring) home(id uint64) int {
	hi, _ := bits.Mul64(id*0x9e3779b97f4a7c15, uint64(2*r.perBlock))
	return int(hi)
}

// push remembers id in the current block. The rotation comes before the
// insert, not after it, so that the ring holds between (blocks-1)*perBlock+1
// and blocks*perBlock completions once it has filled, never fewer: the
// bounds that Config.Exact promises.
//
// It counts every completion, even one of an ID the block already holds,
// so that the bounds hold in completions however often an ID repeats; the
// table cannot overflow, as it never holds more IDs than completions.
func (r *ring) push(id uint64) {
	b := &r.blocks[r.cur]
	if b.n == r.perBlock {
		if r.cur++; r.cur == len(r.blocks) {
			r.cur = 0
		}
		b = &r.blocks[r.cur]
		if b.keys == nil {
			// First use: allocated now, not at New (see New).
			b.keys = make([]uint64, 2*r.perBlock)
		} else {
			clear(b.keys)
		}
		b.n, b.hasZero = 0, false
	}
	b.n++
	if id == 0 {
		b.hasZero = true
		return
	}
	keys := b.keys
	for i := r.home(id); ; {
		switch keys[i] {
		case 0:
			keys[i] = id
			return
		case id:
			return
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// contains reports whether any block holds id.
//
// The current block comes first, on its own: push keeps it in cache, and a
// replay that arrives soon after its input was trimmed ends the search
// there. The older blocks are mostly out of cache and out of the TLB, so
// contains then loads the ID's home slot in each of them before looking at
// any: those loads depend on nothing but h, and the CPU overlaps their
// misses. Probed one after another, each waited on a branch over the last
// one's result, and a Check that missed a full ring of the default config
// took about 700 ns instead of 420. At half load the home slot settles most
// blocks by itself, holding the ID or nothing; the rest continue from h+1,
// usually in the same cache line.
func (r *ring) contains(id uint64) bool {
	blocks := r.blocks
	if id == 0 {
		for i := range blocks {
			if blocks[i].hasZero {
				return true
			}
		}
		return false
	}
	h := r.home(id)
	if blocks[r.cur].has(id, h) {
		return true
	}
	var at [maxExactBlocks]uint64
	for j := range blocks {
		if blocks[j].keys != nil { // else not used yet: at[j] stays empty
			at[j] = blocks[j].keys[h]
		}
	}
	for j := range blocks {
		switch at[j] {
		case id:
			return true
		case 0:
		default:
			if j != r.cur && blocks[j].has(id, h+1) {
				return true
			}
		}
	}
	return false
}

// has looks for a non-zero id in b from slot i on, up to the first empty
// slot.
func (b *idBlock) has(id uint64, i int) bool {
	keys := b.keys
	for {
		if i == len(keys) {
			i = 0
		}
		switch keys[i] {
		case id:
			return true
		case 0:
			return false
		}
		i++
	}
}

// len is the number of completions the ring remembers, repeats included.
func (r *ring) len() int {
	n := 0
	for i := range r.blocks {
		n += r.blocks[i].n
	}
	return n
}
