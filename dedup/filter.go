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
	// words holds every generation, interleaved: the filter is cut into
	// units, and a unit holds one sub-block of sub words of each
	// generation, side by side. An ID has one unit, the same in every
	// generation, so a check reads that one unit, a cache line for the
	// default config, where separate generations cost a line each.
	words  []uint64
	gens   []generation // counts per generation; gens[newest] takes adds
	newest int
	perGen int    // IDs the newest takes before it rotates
	units  uint64 // units in the filter: sub-blocks per generation
	sub    int    // words per sub-block: a generation's part of a unit
	unit   int    // words per unit: sub*Generations, kept for the hot path
	rounds int    // bits per ID in each word of its sub-block
	// The ID being checked (locate): the first word of its unit and the
	// bits it sets in each word of a sub-block, the same in every
	// generation, computed once per Check.
	base uint64
	mask [maxSubWords]uint64

	pair bool      // sub-blocks of two words, bits from one hash: seenPair
	use  [5]uint64 // all ones for each of the rounds: pick

	ring ring // the exact record of recent completions

	checked, fresh, duplicates, suspects uint64
}

// generation counts what one generation holds, kept as it goes so that
// Stats does not popcount megabytes.
type generation struct {
	ids  int    // IDs added since the last clear
	ones uint64 // bits set
}

// New returns an empty Filter. Its memory is about BitsPerID*Window/8 bytes
// of Bloom filters, allocated here, plus 16*B/(B-1) bytes per Exact
// completion, which is 17 for B = 16 blocks (for the default config 4.7 MB
// plus 18 MB). Only the first block of the ring is allocated here, each
// other one when the ring first rotates into it, so a task that completes
// fewer than Exact inputs, a short run or one of many small tasks, never
// pays for the whole ring, and a full filter allocates nothing more.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Filter{cfg: cfg, perGen: cfg.perGeneration(), ring: newRing(cfg)}
	f.sub = subWords(cfg.Generations)
	f.unit = f.sub * cfg.Generations
	m, rounds := sizing(uint(f.perGen), cfg.FPRate/float64(cfg.Generations), f.sub)
	f.units, f.rounds = uint64(m/(uint(f.sub)*wordBits)), int(rounds)
	f.pair = f.sub == 2 && f.rounds <= len(f.use)
	for r := range min(f.rounds, len(f.use)) {
		f.use[r] = ^uint64(0)
	}
	// The bloom package allocates the bitset; the filter reads, sets and
	// clears its words itself (probe, add, rotate).
	bf := bloom.New(uint(f.genBits())*uint(cfg.Generations), uint(f.rounds*f.sub))
	f.words = bf.BitSet().Words()[:f.units*uint64(f.unit)]
	f.gens = make([]generation, cfg.Generations)
	return f, nil
}

// The layout. A generation is a split-block Bloom filter: an ID's bits
// all lie in one sub-block of a few words, picked by the ID's hash, with
// the same number of bits (rounds) in each word, each bit picked by six
// bits of a hash, as in the split-block filters of Parquet and Impala.
// The generations are interleaved: the sub-blocks of one index, one per
// generation, sit side by side in a unit, so a check of a fresh ID reads
// one unit and the add writes a sub-block of it. With four generations of
// two words (the default) a unit is 64 bytes, one cache line: bitset
// allocates its words as one large object, which the Go heap aligns to a
// page, so the units are aligned to lines.
//
// Until round sixteen (docs/performance.md) each generation was a
// separate Bloom filter of 512-bit blocks, so a fresh ID read three lines
// of three megabyte-sized arrays, and in word count's count tasks those
// misses were most of dedup's cost even prefetched. Smaller sub-blocks
// take more bits for the same rate (the IDs spread less evenly over
// them), and four generations take fewer than three (the window wastes
// less): together about a quarter more bits per ID than before.
const (
	maxSubWords = 4 // Generations >= 2
	lineWords   = 8 // a 64-byte cache line
)

// genBits is the bits of one generation: a sub-block in every unit.
func (f *Filter) genBits() uint64 { return f.units * uint64(f.sub) * wordBits }

// subWords is the words of a generation's sub-block: as many as let every
// generation's sub-block share one cache line, at least one.
func subWords(generations int) int {
	return max(1, min(maxSubWords, lineWords/generations))
}

// sizing returns m bits per generation (whole sub-blocks of sub words)
// and the rounds of bits per word an ID sets, for n IDs at a
// false-positive rate of at most p: the rounds that need the fewest bits,
// at most maxRounds. The bits sit in one sub-block, so more rounds cost
// no more cache lines, only a few instructions.
func sizing(n uint, p float64, sub int) (m, rounds uint) {
	key := sizingKey{n, p, sub}
	sizingMu.Lock()
	r, ok := sizings[key]
	sizingMu.Unlock()
	if !ok {
		r.m, r.rounds = computeSizing(n, p, sub)
		sizingMu.Lock()
		sizings[key] = r
		sizingMu.Unlock()
	}
	return r.m, r.rounds
}

// Sizing takes tens of milliseconds (a bisection over a Poisson sum for
// every number of rounds), and every stateful task of a run asks for the same sizes:
// they are computed once per process, and the default's not at all.
type sizingKey struct {
	n   uint
	p   float64
	sub int
}

type sized struct{ m, rounds uint }

var (
	sizingMu sync.Mutex
	sizings  = map[sizingKey]sized{defaultSizingKey(): defaultSizing}
)

// defaultSizing is computeSizing's answer for DefaultConfig, known ahead
// so that a process whose stateful tasks use the default does not spend
// 25 ms of CPU on it when the first one starts (TestDefaultSizing checks
// it against computeSizing).
var defaultSizing = sized{m: 9312384, rounds: 5}

func defaultSizingKey() sizingKey {
	c := DefaultConfig()
	return sizingKey{uint(c.perGeneration()), c.FPRate / float64(c.Generations), subWords(c.Generations)}
}

func computeSizing(n uint, p float64, sub int) (m, rounds uint) {
	best := math.Inf(1)
	for r := uint(1); r <= maxRounds; r++ {
		// The rate falls as bits per ID grow: bisect for the fewest.
		lo, hi := 1.0, 1024.0
		if fpRate(hi, r, sub) > p {
			continue
		}
		for range 60 {
			mid := (lo + hi) / 2
			if fpRate(mid, r, sub) > p {
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
	subBits := float64(sub * wordBits)
	blocks := max(1, uint(math.Ceil(best*float64(max(n, 1))/subBits)))
	return blocks * uint(subBits), rounds
}

// maxRounds is the most bits an ID sets in each word of its sub-block.
// The default (sub-blocks of two words at about 0.0002 per generation)
// takes five; one-word sub-blocks (five or more generations) at low
// rates take all six.
const maxRounds = 6

// fpRate is the false-positive rate of a generation of c bits of filter
// per ID, in sub-blocks of sub words, each ID setting rounds bits in each
// word of its sub-block: the chance that all of a never-seen ID's bits are
// set, over the Poisson-distributed number of IDs j its sub-block holds
// (mean sub*64/c). The words of a sub-block are filled independently, each
// by rounds*j bits at random (some of them the same bit), and a word has
// all of the ID's rounds bits, also drawn with repetition, with
// probability E[(S/64)^rounds], S the word's distinct bits set.
func fpRate(c float64, rounds uint, sub int) float64 {
	lambda := float64(sub*wordBits) / c
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
		rate += pj * math.Pow(word, float64(sub))
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
	var inNewest, maybe bool
	if f.pair {
		inNewest, maybe = f.seenPair(id)
	} else {
		f.locate(id)
		inNewest, maybe = f.probe()
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
		FillRatio:  float64(f.gens[f.newest].ones) / float64(f.genBits()),
		BitsPerID:  float64(len(f.words)) * wordBits / float64(f.cfg.Window),
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
			logMiss += math.Log1p(-fpRate(float64(f.genBits())/float64(g.ids), uint(f.rounds), f.sub))
		}
	}
	s.EstimatedFPRate = -math.Expm1(logMiss)
	return s
}

// Prefetch reads the line that a Check of id will probe, without changing
// anything: a task calls it a few inputs ahead of their Checks. A Check
// waits for its unit, and a filter of megabytes misses the cache; issued
// ahead, the reads of several IDs overlap instead of each Check waiting
// in turn.
func (f *Filter) Prefetch(id uint64) { f.PrefetchAll([]uint64{id}) }

// PrefetchAll is Prefetch of each of ids, at most PrefetchBatch of them,
// for the price of one call to the prefetch instruction's routine.
func (f *Filter) PrefetchAll(ids []uint64) {
	var at [2 * PrefetchBatch]uint64
	n := 0
	for _, id := range ids[:min(len(ids), PrefetchBatch)] {
		base := f.unitOf(id) * uint64(f.unit)
		at[n] = base
		n++
		if last := base + uint64(f.unit) - 1; last/lineWords != base/lineWords {
			at[n] = last // a unit that spans two lines
			n++
		}
	}
	prefetchAt(&f.words[0], &at[0], n)
}

// PrefetchBatch is the most IDs PrefetchAll takes at once.
const PrefetchBatch = 16

// unitOf is the unit of id, from the top bits of its first hash (locate).
func (f *Filter) unitOf(id uint64) uint64 {
	hi, _ := bits.Mul64(splitmix(id+splitmixGamma), f.units)
	return hi
}

const splitmixGamma = 0x9e3779b97f4a7c15 // splitmix64's increment

// locate finds the unit of id and the bits it sets in a sub-block, the
// same in every generation since they all have the same size and rounds.
// IDs are meant to be well-mixed hashes already, but tests and hand-made
// IDs are often small counters, so the ID is mixed again: splitmix64
// outputs, independent of each other (a few nanoseconds), one for the
// unit by its top bits and then as many as the bits need, each cut into
// ten 6-bit positions. The bloom package's own Test and Add would hash
// the ID's bytes with murmur once per generation and again to add, and
// spread the bits over the whole filter.
//
// Each word's bits are gathered in a register and stored once: a mask
// built by read-modify-writes of memory waits for each store before the
// next (docs/performance.md, round twelve).
func (f *Filter) locate(id uint64) {
	z := id + splitmixGamma
	f.base = f.unitOf(id) * uint64(f.unit)
	var h uint64
	left, r := 0, uint64(1)
	for w := range f.sub {
		var m uint64
		for range f.rounds {
			if left == 0 {
				r++
				h, left = splitmix(z+r*splitmixGamma), 10
			}
			m |= 1 << (h & (wordBits - 1))
			h >>= 6
			left--
		}
		f.mask[w] = m
	}
}

func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// seenPair is locate and probe in one for sub-blocks of two words whose
// bits all come from one hash (rounds of at most five), the default's
// layout: the same unit and bits (TestSeenPairIsLocateAndProbe), with the
// masks built and compared in registers. In word count's profiles the
// loops of locate, whose trip counts are fields, took a third of a
// check's samples and the line it waits for another third.
func (f *Filter) seenPair(id uint64) (inNewest, maybe bool) {
	base := f.unitOf(id) * uint64(f.unit)
	// locate's first hash for the bits, its r = 2.
	z := id + splitmixGamma
	h := splitmix(z + splitmixGamma + splitmixGamma)
	m0, m1 := f.pick(h), f.pick(h>>(6*f.rounds))
	f.base, f.mask[0], f.mask[1] = base, m0, m1
	u := f.words[base : base+uint64(f.unit)]
	for g := 0; g+1 < len(u); g += 2 {
		if m0&^u[g]|m1&^u[g+1] == 0 {
			maybe = true
			inNewest = inNewest || g == 2*f.newest
		}
	}
	return inNewest, maybe
}

// pick is the bits of one word of a sub-block for seenPair: one from each
// of the first rounds 6-bit pieces of h, as locate takes them. All five
// are computed and the ones past rounds masked off (f.use), so that they
// do not wait for each other as a loop's would.
func (f *Filter) pick(h uint64) uint64 {
	return 1<<(h&63)&f.use[0] | 1<<(h>>6&63)&f.use[1] | 1<<(h>>12&63)&f.use[2] |
		1<<(h>>18&63)&f.use[3] | 1<<(h>>24&63)&f.use[4]
}

// probe reports whether every bit of the ID is set in the newest
// generation, and whether it is in some generation. It reads the ID's
// unit once; a generation not used yet is all zeros and never matches.
// The bits are read from the bitset's words directly: the bloom package
// can only test bytes it hashes itself or a slice of locations over the
// whole filter.
func (f *Filter) probe() (inNewest, maybe bool) {
	u := f.words[f.base : f.base+uint64(f.unit)]
	for g := range len(f.gens) {
		s := u[g*f.sub : (g+1)*f.sub]
		var missing uint64
		for w := range s {
			missing |= f.mask[w] &^ s[w]
		}
		if missing == 0 {
			maybe = true
			inNewest = inNewest || g == f.newest
		}
	}
	return inNewest, maybe
}

// add puts the ID into the newest generation and rotates when that
// generation is full. The caller knows the ID is not there yet. The line
// was read by the probe just before, so the stores hit the cache.
func (f *Filter) add() {
	g := &f.gens[f.newest]
	off := f.base + uint64(f.newest*f.sub)
	s := f.words[off : off+uint64(f.sub)]
	var ones int
	for w := range s {
		old := s[w]
		s[w] = old | f.mask[w]
		ones += bits.OnesCount64(f.mask[w] &^ old)
	}
	g.ones += uint64(ones)
	g.ids++
	if g.ids >= f.perGen {
		f.rotate()
	}
}

// rotate drops the oldest generation by clearing its sub-block in every
// unit and making it the newest: one pass over the filter every perGen
// adds, and no allocation.
func (f *Filter) rotate() {
	if f.newest++; f.newest == len(f.gens) {
		f.newest = 0
	}
	g := &f.gens[f.newest]
	if g.ids == 0 {
		return // never used: nothing to clear
	}
	sub, unit := uint64(f.sub), uint64(f.unit)
	for i := uint64(f.newest) * sub; i < uint64(len(f.words)); i += unit {
		for w := range sub {
			f.words[i+w] = 0
		}
	}
	*g = generation{}
}
