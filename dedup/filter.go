package dedup

import (
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
)

// Verdict is what Check says about a record ID.
type Verdict uint8

const (
	// Fresh: no generation has seen the ID. Process the record. (The
	// verdict is not called New because New is the constructor.)
	Fresh Verdict = iota
	// Duplicate: the Bloom filter has seen the ID and an exact record
	// confirms it. Do not run user code again; re-emit the logged outputs
	// and ack.
	Duplicate
	// Suspect: the Bloom filter says "maybe" but nothing exact confirms it,
	// so it may be a false positive. Process the record (a false positive
	// must never drop one) and count it.
	Suspect
)

func (v Verdict) String() string {
	switch v {
	case Fresh:
		return "fresh"
	case Duplicate:
		return "duplicate"
	case Suspect:
		return "suspect"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Filter is the duplicate filter of one task. It is not safe for concurrent
// use: the task's goroutine owns it (DESIGN.md section 6).
type Filter struct {
	cfg Config
	// gens is a ring of Bloom filters of equal size; gens[newest] takes
	// adds and gens[(newest+1)%len] is the oldest, cleared on rotation.
	gens    []generation
	newest  int
	perGen  int    // IDs the newest takes before it rotates
	m       uint64 // bits per generation, a whole number of blocks
	nblocks uint64 // blocks of blockBits per generation
	k       int    // bits per ID, all in one block
	// The ID being checked (locate): its block and the k bits it sets
	// there, the same in every generation, computed once per Check.
	blk  uint64
	mask [blockWords]uint64

	ring ring // the exact record of recent completions

	checked, fresh, duplicates, suspects uint64
}

// generation is one Bloom filter plus the counts that Stats needs, kept as
// it goes so that Stats does not popcount megabytes.
type generation struct {
	bf    *bloom.BloomFilter
	words []uint64 // bf's bits, probed directly (see probe)
	ids   int      // IDs added since the last clear
	ones  uint64   // bits set
}

// New returns an empty Filter. Its memory is about BitsPerID*Window/8 bytes
// of Bloom filters plus 16*B/(B-1) bytes per Exact completion, which is 17
// for B = 16 blocks (for the default config 3.6 MB plus 18 MB), but only the
// first generation and the first block of the ring are allocated here; each
// other one is allocated when the filter first rotates into it. A task that
// sees fewer than Window IDs, a short run or one of many small tasks, never
// pays for the rest, and a full filter allocates nothing more.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Filter{cfg: cfg, perGen: cfg.perGeneration(), ring: newRing(cfg)}
	m, k := sizing(uint(f.perGen), cfg.FPRate/float64(cfg.Generations))
	f.m, f.k, f.nblocks = uint64(m), int(k), uint64(m/blockBits)
	f.gens = make([]generation, cfg.Generations)
	f.gens[0] = f.newGeneration()
	return f, nil
}

// newGeneration allocates one Bloom filter. All generations get the same m
// and k, so an ID probes the same block and bits in each and one hash
// serves them all.
func (f *Filter) newGeneration() generation {
	bf := bloom.New(uint(f.m), uint(f.k))
	return generation{bf: bf, words: bf.BitSet().Words()}
}

// A generation is blocked: an ID's k bits all lie in one block of 512
// bits, a cache line, picked by the ID's hash. A check of a fresh ID then
// reads one line per generation and the add writes to the newest's line
// it has just read, where a classic Bloom filter spreads the k bits over
// the whole megabyte: in word count's count tasks that was a cache miss
// per probe, 4 or more per generation and 6 more to add, and dedup was a
// fifth of the CPU. The price is a higher false-positive rate at the same
// bits, since the IDs do not spread evenly over the blocks; sizing pays
// it in bits: 27.7 per ID for the default config instead of 25.2, at the
// same measured rate (BenchmarkBitsPerID). Five generations would take
// 25.7 bits at that rate, but each check then waits for five lines, and
// in word count that cost more than the three (docs/performance.md).
// (bitset allocates a generation's words as one large object, which the
// Go heap aligns to a page, so blocks are aligned to cache lines.)
const (
	blockBits  = 512
	blockWords = blockBits / 64
)

// sizing returns m bits (whole blocks) and k bits per ID for n IDs at a
// false-positive rate of at most p: the k that needs the fewest bits, at
// most maxK. The k bits sit in one block, so a larger k costs no more
// cache lines, only a few instructions.
func sizing(n uint, p float64) (m, k uint) {
	key := sizingKey{n, p}
	sizingMu.Lock()
	r, ok := sizings[key]
	sizingMu.Unlock()
	if !ok {
		r.m, r.k = computeSizing(n, p)
		sizingMu.Lock()
		sizings[key] = r
		sizingMu.Unlock()
	}
	return r.m, r.k
}

// Sizing takes a few milliseconds (a bisection over a Poisson sum for
// every k), and every stateful task of a run asks for the same sizes:
// they are computed once per process.
type sizingKey struct {
	n uint
	p float64
}

var (
	sizingMu sync.Mutex
	sizings  = map[sizingKey]struct{ m, k uint }{}
)

func computeSizing(n uint, p float64) (m, k uint) {
	best := math.Inf(1)
	for kk := uint(1); kk <= maxK; kk++ {
		// The rate falls as bits per ID grow: bisect for the fewest.
		lo, hi := 1.0, 1024.0
		if blockedFPRate(hi, kk) > p {
			continue
		}
		for range 60 {
			mid := (lo + hi) / 2
			if blockedFPRate(mid, kk) > p {
				lo = mid
			} else {
				hi = mid
			}
		}
		if hi < best {
			best, k = hi, kk
		}
	}
	if k == 0 { // p below what maxK bits can give: take the most bits tried
		best, k = 1024, maxK
	}
	blocks := max(1, uint(math.Ceil(best*float64(max(n, 1))/blockBits)))
	return blocks * blockBits, k
}

// maxK is the most bits an ID sets: locate takes 7 positions of 9 bits
// from each of two 64-bit hashes.
const maxK = 14

// blockedFPRate is the false-positive rate of a blocked Bloom filter of
// c bits of filter per ID, each ID setting k bits: the chance that k random bits of a
// block are set, over the Poisson-distributed number of IDs j a block
// holds (mean blockBits/c), each of which set k of its bits at random.
func blockedFPRate(c float64, k uint) float64 {
	lambda := blockBits / c
	rate := 0.0
	// Terms beyond the mean plus 12 standard deviations are negligible.
	top := int(lambda + 12*math.Sqrt(lambda) + 20)
	logLambda := math.Log(lambda)
	for j := 0; j <= top; j++ {
		lg, _ := math.Lgamma(float64(j) + 1)
		pj := math.Exp(-lambda + float64(j)*logLambda - lg)
		fill := -math.Expm1(float64(k*uint(j)) * math.Log1p(-1.0/blockBits))
		rate += pj * math.Pow(fill, float64(k))
	}
	return rate
}

// Check classifies a record ID. exact is the caller's own exact record, for
// example its output-log index ("is this input still in my log?"); it may be
// nil. Check never returns Duplicate unless exact(id) is true or id is among
// the recent completions the Filter remembers (see Config.Exact), so a Bloom
// false positive costs an exact lookup and a Suspect, never a dropped record.
//
// After Check the ID is in the newest generation whatever the verdict. A
// replayed ID may well come again (another failure, a late copy from NATS),
// and restarting its window now keeps it findable for as long as its newest
// exact record (outputs logged again, a later Completed) can confirm it.
func (f *Filter) Check(id uint64, exact func(uint64) bool) Verdict {
	f.checked++
	f.locate(id)
	inNewest := f.probe(&f.gens[f.newest])
	maybe := inNewest
	for i, j := 1, f.newest; i < len(f.gens) && !maybe; i++ {
		if j--; j < 0 { // walking back from the newest without a modulo
			j = len(f.gens) - 1
		}
		if f.gens[j].words == nil {
			break // not allocated yet: it and the older ones hold nothing
		}
		maybe = f.probe(&f.gens[j])
	}
	if !maybe {
		f.add()
		f.fresh++
		return Fresh
	}
	if !inNewest {
		f.add()
	}
	// The caller's exact record first: in the runtime it is the output
	// log's index, a map lookup, and most replays find their input still
	// logged (its tree failed, so it was not trimmed). A ring miss probes
	// every block, a few hundred nanoseconds in a full ring of the default
	// config. A caller whose exact check is expensive (a remote sink) can
	// pass nil and check Suspects itself.
	if (exact != nil && exact(id)) || f.ring.contains(id) {
		f.duplicates++
		return Duplicate
	}
	f.suspects++
	return Suspect
}

// Completed remembers id exactly among the recent completions. The caller
// calls it when it trims id's log entry, so that a replay arriving after the
// trim is still confirmed. The last Exact completions are always
// remembered; older ones fall out a block at a time (Config.Exact gives the
// bounds). An ID completed twice is remembered from its latest completion.
func (f *Filter) Completed(id uint64) {
	f.ring.push(id)
}

// Stats are counters and gauges of a Filter, for metrics.
type Stats struct {
	// Checked counts calls of Check; New, Duplicates and Suspects count its
	// Fresh, Duplicate and Suspect verdicts.
	Checked, New, Duplicates, Suspects uint64
	// Remembered is the number of IDs in the Bloom generations.
	Remembered int
	// FillRatio is the fraction of bits set in the newest generation.
	FillRatio float64
	// EstimatedFPRate is the false-positive rate of the whole filter now:
	// the chance that a never-seen ID hits in some generation, from the
	// fill of each.
	EstimatedFPRate float64
	// BitsPerID is the Bloom filters' bits divided by Window: the memory
	// cost of remembering one ID.
	BitsPerID float64
	// ExactLen is the number of completions remembered exactly, an ID
	// completed twice counted twice: all of them until the first rotation,
	// then between Exact and B*ceil(Exact/(B-1)) (Config.Exact).
	ExactLen int
}

// Stats returns the counters and gauges; it costs O(Generations) plus
// O(blocks of the exact record), at most 16.
func (f *Filter) Stats() Stats {
	s := Stats{
		Checked:    f.checked,
		New:        f.fresh,
		Duplicates: f.duplicates,
		Suspects:   f.suspects,
		FillRatio:  float64(f.gens[f.newest].ones) / float64(f.m),
		BitsPerID:  float64(f.m) * float64(len(f.gens)) / float64(f.cfg.Window),
		ExactLen:   f.ring.len(),
	}
	// A never-seen ID is a false positive unless every generation misses:
	// 1 - prod(1 - rate of each), summed in logs so that the tiny rates of
	// a nearly empty filter do not round to 0. A generation's rate comes
	// from the IDs it holds (blockedFPRate), not from its fill alone,
	// which would leave out how unevenly they spread over the blocks.
	logMiss := 0.0
	for i := range f.gens {
		g := &f.gens[i]
		s.Remembered += g.ids
		if g.ids > 0 {
			logMiss += math.Log1p(-blockedFPRate(float64(f.m)/float64(g.ids), uint(f.k)))
		}
	}
	s.EstimatedFPRate = -math.Expm1(logMiss)
	return s
}

// Prefetch reads the lines that a Check of id will probe, without
// changing anything: a task calls it for every input of a frame before it
// checks the first. A Check waits for its lines, one per generation, and
// megabyte-sized generations miss the cache; issued back to back, the
// reads of many IDs overlap instead of each Check waiting in turn.
func (f *Filter) Prefetch(id uint64) {
	blk := f.blockOf(id)
	for i := range f.gens {
		if w := f.gens[i].words; w != nil {
			prefetch(&w[blk*blockWords])
		}
	}
}

// blockOf is the block of id in every generation, from the top bits of
// its first hash (locate).
func (f *Filter) blockOf(id uint64) uint64 {
	hi, _ := bits.Mul64(splitmix(id+splitmixGamma), f.nblocks)
	return hi
}

const splitmixGamma = 0x9e3779b97f4a7c15 // splitmix64's increment

// locate finds the block of id and the k bits it sets there, the same in
// every generation since they all have the same m and k. IDs are meant to
// be well-mixed hashes already, but tests and hand-made IDs are often
// small counters, so the ID is mixed again: three splitmix64 outputs,
// independent of each other (a few nanoseconds), one for the block by its
// top bits and two cut into 9-bit bit positions. The bloom package's own
// Test and Add would hash the ID's bytes with murmur once per generation
// and again to add, and spread the bits over the whole filter.
func (f *Filter) locate(id uint64) {
	z := id + splitmixGamma
	f.blk = f.blockOf(id)
	// The positions go into a local mask, written back once: updating
	// f.mask in place made each bit wait for the store before it.
	var mask [blockWords]uint64
	h := splitmix(z + splitmixGamma)
	for range min(f.k, 7) {
		pos := h & (blockBits - 1)
		mask[pos>>6] |= 1 << (pos & 63)
		h >>= 9
	}
	h = splitmix(z + splitmixGamma + splitmixGamma)
	for range f.k - min(f.k, 7) {
		pos := h & (blockBits - 1)
		mask[pos>>6] |= 1 << (pos & 63)
		h >>= 9
	}
	// Word by word: a copy of the whole array (f.mask = mask) compiles to
	// 16-byte loads of what the loops stored 8 bytes at a time, which
	// cannot be forwarded from the stores and stalled until they reached
	// the cache (a tenth of the dedup word count's CPU samples landed on
	// that copy).
	for w := range blockWords {
		f.mask[w] = mask[w]
	}
}

func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// block returns the ID's block in g: one cache line, read as eight words
// with one bounds check.
func (f *Filter) block(g *generation) *[blockWords]uint64 {
	return (*[blockWords]uint64)(g.words[f.blk*blockWords : (f.blk+1)*blockWords])
}

// probe reports whether every bit of the ID is set in g. The bits are
// read from the bitset's words directly: the bloom package can only test
// bytes it hashes itself or a slice of locations over the whole filter;
// sizing, storage and clearing still come from it. The eight words are
// tested together, without a branch per word.
func (f *Filter) probe(g *generation) bool {
	b := f.block(g)
	var missing uint64
	for w := range blockWords {
		missing |= f.mask[w] &^ b[w]
	}
	return missing == 0
}

// add puts the ID into the newest generation and rotates when that
// generation is full. The caller knows the ID is not there yet. The line
// was read by the probe of the newest generation just before, so the
// stores hit the cache.
func (f *Filter) add() {
	g := &f.gens[f.newest]
	b := f.block(g)
	var ones int
	for w := range blockWords {
		old := b[w]
		b[w] = old | f.mask[w]
		ones += bits.OnesCount64(f.mask[w] &^ old)
	}
	g.ones += uint64(ones)
	g.ids++
	if g.ids >= f.perGen {
		f.rotate()
	}
}

// rotate drops the oldest generation by clearing it in place and making it
// the newest: one memclr of m/8 bytes every perGen adds, and no allocation
// once every generation has been used.
func (f *Filter) rotate() {
	if f.newest++; f.newest == len(f.gens) {
		f.newest = 0
	}
	g := &f.gens[f.newest]
	if g.bf == nil {
		*g = f.newGeneration()
		return
	}
	g.bf.ClearAll()
	g.ids, g.ones = 0, 0
}
