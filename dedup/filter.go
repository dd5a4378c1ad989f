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
	rounds  int    // bits per ID in each word of its block (k, the bits per ID, is rounds*blockWords)
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
// for B = 16 blocks (for the default config 3.8 MB plus 18 MB), but only the
// first generation and the first block of the ring are allocated here; each
// other one is allocated when the filter first rotates into it. A task that
// sees fewer than Window IDs, a short run or one of many small tasks, never
// pays for the rest, and a full filter allocates nothing more.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Filter{cfg: cfg, perGen: cfg.perGeneration(), ring: newRing(cfg)}
	m, rounds := sizing(uint(f.perGen), cfg.FPRate/float64(cfg.Generations))
	f.m, f.rounds, f.nblocks = uint64(m), int(rounds), uint64(m/blockBits)
	f.gens = make([]generation, cfg.Generations)
	f.gens[0] = f.newGeneration()
	return f, nil
}

// newGeneration allocates one Bloom filter. All generations get the same m
// and k, so an ID probes the same block and bits in each and one hash
// serves them all.
func (f *Filter) newGeneration() generation {
	bf := bloom.New(uint(f.m), uint(f.rounds*blockWords))
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
// it in bits. Five generations would take fewer bits at the same rate,
// but each check then waits for five lines, and in word count that cost
// more than the three (docs/performance.md).
//
// Within the block the bits are split: an ID sets the same number of bits
// (rounds, usually 1) in each of the block's eight words, each bit picked
// by six bits of a hash, as in the split-block filters of Parquet and
// Impala. Picking k bits anywhere in the block instead took 27.7 bits
// per ID for the default config where the split layout takes 28.7, at
// the same rate, but building its mask was a chain of read-modify-writes
// of whichever word each bit fell in: about a third of a Check's time
// with the lines in cache (docs/performance.md, round twelve). The split
// mask is eight independent shifts per round.
// (bitset allocates a generation's words as one large object, which the
// Go heap aligns to a page, so blocks are aligned to cache lines.)
const (
	blockBits  = 512
	blockWords = blockBits / 64
)

// sizing returns m bits (whole blocks) and the rounds of bits per word an
// ID sets, for n IDs at a false-positive rate of at most p: the rounds
// that need the fewest bits, at most maxRounds. The bits sit in one
// block, so more rounds cost no more cache lines, only a few
// instructions.
func sizing(n uint, p float64) (m, rounds uint) {
	key := sizingKey{n, p}
	sizingMu.Lock()
	r, ok := sizings[key]
	sizingMu.Unlock()
	if !ok {
		r.m, r.rounds = computeSizing(n, p)
		sizingMu.Lock()
		sizings[key] = r
		sizingMu.Unlock()
	}
	return r.m, r.rounds
}

// Sizing takes a few milliseconds (a bisection over a Poisson sum for
// every number of rounds), and every stateful task of a run asks for the same sizes:
// they are computed once per process.
type sizingKey struct {
	n uint
	p float64
}

var (
	sizingMu sync.Mutex
	sizings  = map[sizingKey]struct{ m, rounds uint }{}
)

func computeSizing(n uint, p float64) (m, rounds uint) {
	best := math.Inf(1)
	for r := uint(1); r <= maxRounds; r++ {
		// The rate falls as bits per ID grow: bisect for the fewest.
		lo, hi := 1.0, 1024.0
		if fpRate(hi, r) > p {
			continue
		}
		for range 60 {
			mid := (lo + hi) / 2
			if fpRate(mid, r) > p {
				lo = mid
			} else {
				hi = mid
			}
		}
		if hi < best {
			best, rounds = hi, r
		}
	}
	if rounds == 0 { // p below what maxRounds can give: take the most bits tried
		best, rounds = 1024, maxRounds
	}
	blocks := max(1, uint(math.Ceil(best*float64(max(n, 1))/blockBits)))
	return blocks * blockBits, rounds
}

// maxRounds is the most bits an ID sets in each word: a round takes six
// bits for each of the eight words from one 64-bit hash. The default
// rate (0.00033 per generation) takes one round; rates below about
// 0.00015 per generation take two, down to 1e-7 at least.
const maxRounds = 3

// fpRate is the false-positive rate of a generation of c bits of filter
// per ID, each ID setting rounds bits in each word of its block: the
// chance that all of a never-seen ID's bits are set, over the
// Poisson-distributed number of IDs j its block holds (mean
// blockBits/c). The words of a block are filled independently, each by
// rounds*j bits at random (some of them the same bit), and a word has all
// of the ID's rounds bits, also drawn with repetition, with probability
// E[(S/64)^rounds], S the word's distinct bits set.
func fpRate(c float64, rounds uint) float64 {
	lambda := blockBits / c
	rate := 0.0
	// Terms beyond the mean plus 12 standard deviations are negligible.
	top := int(lambda + 12*math.Sqrt(lambda) + 20)
	logLambda := math.Log(lambda)
	// occ[s] is the chance that s distinct bits of a word are set after
	// the draws so far; each pass of the j loop adds one ID's rounds draws.
	var occ, next [wordBits + 1]float64
	occ[0] = 1
	for j := 0; j <= top; j++ {
		if j > 0 {
			for range rounds {
				next[0] = 0
				for s := 1; s <= wordBits; s++ {
					next[s] = occ[s]*float64(s)/wordBits + occ[s-1]*float64(wordBits-s+1)/wordBits
				}
				occ = next
			}
		}
		word := 0.0
		for s := 1; s <= wordBits; s++ {
			word += occ[s] * math.Pow(float64(s)/wordBits, float64(rounds))
		}
		lg, _ := math.Lgamma(float64(j) + 1)
		pj := math.Exp(-lambda + float64(j)*logLambda - lg)
		rate += pj * math.Pow(word, blockWords)
	}
	return rate
}

const wordBits = 64

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
	// from the IDs it holds (fpRate), not from its fill alone,
	// which would leave out how unevenly they spread over the blocks.
	logMiss := 0.0
	for i := range f.gens {
		g := &f.gens[i]
		s.Remembered += g.ids
		if g.ids > 0 {
			logMiss += math.Log1p(-fpRate(float64(f.m)/float64(g.ids), uint(f.rounds)))
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

// locate finds the block of id and the bits it sets there, the same in
// every generation since they all have the same m and rounds. IDs are
// meant to be well-mixed hashes already, but tests and hand-made IDs are
// often small counters, so the ID is mixed again: splitmix64 outputs,
// independent of each other (a few nanoseconds), one for the block by its
// top bits and one per round cut into eight 6-bit positions, one per
// word. The bloom package's own Test and Add would hash the ID's bytes
// with murmur once per generation and again to add, and spread the bits
// over the whole filter.
//
// Each word's bit is stored on its own: no word is read back and
// modified while the mask is built, which with bits anywhere in the
// block made each bit wait for the store of the one before it. (A copy
// of a whole local array into f.mask compiled to 16-byte loads of 8-byte
// stores, which cannot be forwarded and stalled until the stores reached
// the cache: a tenth of the dedup word count's samples, once.)
func (f *Filter) locate(id uint64) {
	z := id + splitmixGamma
	f.blk = f.blockOf(id)
	h := splitmix(z + splitmixGamma)
	for w := range blockWords {
		f.mask[w] = 1 << (h & (wordBits - 1))
		h >>= 6
	}
	for r := 1; r < f.rounds; r++ {
		h = splitmix(z + uint64(r+1)*splitmixGamma)
		for w := range blockWords {
			f.mask[w] |= 1 << (h & (wordBits - 1))
			h >>= 6
		}
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
