package dedup

import (
	"fmt"
	"math"
	"math/bits"

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
	gens   []generation
	newest int
	perGen int    // IDs the newest takes before it rotates
	m      uint64 // bits per generation
	k      int    // probes per ID
	// locs are the k bit positions of the ID being checked (locate), the
	// same in every generation: computed once, then probed and set.
	locs []uint64

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
// for B = 16 blocks (for the default config 3.3 MB plus 18 MB), but only the
// first generation and the first block of the ring are allocated here; each
// other one is allocated when the filter first rotates into it. A task that
// sees fewer than Window IDs, a short run or one of many small tasks, never
// pays for the rest, and a full filter allocates nothing more.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Filter{cfg: cfg, perGen: cfg.perGeneration(), ring: newRing(cfg)}
	f.gens = make([]generation, cfg.Generations)
	f.gens[0] = f.newGeneration()
	f.m = uint64(f.gens[0].bf.Cap())
	f.k = int(f.gens[0].bf.K())
	f.locs = make([]uint64, f.k)
	return f, nil
}

// newGeneration allocates one Bloom filter. All generations get the same m
// and k, so an ID probes the same bit positions in each and one hash serves
// them all.
func (f *Filter) newGeneration() generation {
	m, k := sizing(uint(f.perGen), f.cfg.FPRate/float64(f.cfg.Generations))
	bf := bloom.New(m, k)
	return generation{bf: bf, words: bf.BitSet().Words()}
}

// sizing returns m bits and k probes for n IDs at false-positive rate p.
// The k that needs the fewest bits (what bloom.EstimateParameters gives,
// 12 for the default config) is not the cheapest: every probe of a
// megabyte-sized filter is a cache miss, and near the optimum the rate
// hardly depends on k. With 85% of the optimal k (10) and m raised to keep
// p, the default config takes 0.6% more bits (25.2 per ID instead of 25.0)
// and a fresh ID costs about a third less (BenchmarkCheckNew); 8 probes
// would cost 5% more bits for little more speed.
func sizing(n uint, p float64) (m, k uint) {
	_, opt := bloom.EstimateParameters(n, p)
	k = max(1, uint(math.Round(0.85*float64(opt))))
	// For k probes and n IDs, the rate is (1-exp(-k*n/m))^k; solved for m.
	m = uint(math.Ceil(-float64(k) * float64(n) / math.Log1p(-math.Pow(p, 1/float64(k)))))
	return m, k
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
	// 1 - prod(1 - fill^k), summed in logs so that the tiny rates of a
	// nearly empty filter do not round to 0.
	logMiss := 0.0
	for i := range f.gens {
		g := &f.gens[i]
		s.Remembered += g.ids
		logMiss += math.Log1p(-math.Pow(float64(g.ones)/float64(f.m), float64(f.k)))
	}
	s.EstimatedFPRate = -math.Expm1(logMiss)
	return s
}

// probes yields the k bit positions of one ID, the same in every generation
// since they all have the same m and k. IDs are meant to be well-mixed
// hashes already, but tests and hand-made IDs are often small counters, so
// the ID is mixed again. Two splitmix64 outputs cost a few nanoseconds; the
// bloom package's Test and Add hash their bytes with murmur on every call,
// once per generation and again to add, and on the default sizes that made
// a fresh ID cost three to four times as long.
//
// The positions come from a 64-bit LCG seeded by the ID, with the ID's own
// odd increment, rather than from Kirsch-Mitzenmacher double hashing
// (h1+i*h2): when h2/2^64 lies near a fraction with a small denominator the
// k positions of double hashing collapse onto a few bits, and such an ID
// looks present as soon as those few are set. About one ID in 5m/k has at
// most k/2 distinct positions: negligible at the default size, but enough
// to break a small filter's window (TestWindowBounds caught it). An LCG
// step costs the same multiply and add.
type probes struct{ x, inc uint64 }

func newProbes(id uint64) probes {
	const gamma = 0x9e3779b97f4a7c15 // splitmix64's increment
	z := id + gamma
	return probes{x: splitmix(z), inc: splitmix(z+gamma) | 1}
}

func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// lcgMul is Knuth's MMIX multiplier.
const lcgMul = 6364136223846793005

// loc maps an LCG state onto [0, m) by its top bits (an LCG's best ones)
// with a multiply-high instead of a modulo, which would cost a division per
// probe.
func loc(x, m uint64) uint64 {
	hi, _ := bits.Mul64(x, m)
	return hi
}

// probe reports whether every position of the ID is set in g. The bits are
// read from the bitset's words directly: the bloom package can only test
// bytes it hashes itself or a slice of locations (which Check would have to
// fill and which it reduces with a modulo); sizing, storage and clearing
// still come from it.
//
// The result is looked at every four probes, not after each: a fresh ID
// fails a probe at random, so a branch per probe is mispredicted about
// once per generation, and those mispredictions cost more than the probes.
// After four probes of a half-full generation the branch almost always
// exits, which predicts well.
func (f *Filter) probe(g *generation) bool {
	words := g.words
	all := uint64(1)
	for i, l := range f.locs {
		all &= words[l>>6] >> (l & 63)
		if i&3 == 3 && all&1 == 0 {
			return false
		}
	}
	return all&1 != 0
}

// locate puts the k bit positions of id in f.locs. The LCG's steps depend
// on each other (a multiply and an add each), so they are taken once per
// Check, not again for every generation probed and for the add; the loads
// of probe and the stores of add are then independent of each other, and a
// fresh ID costs about a fifth less (BenchmarkCheckNew).
func (f *Filter) locate(id uint64) {
	p := newProbes(id)
	x, m := p.x, f.m
	for i := range f.locs {
		x = x*lcgMul + p.inc
		f.locs[i] = loc(x, m)
	}
}

// add puts the ID into the newest generation and rotates when that
// generation is full. The caller knows the ID is not there yet. It counts
// the bits it sets without a branch per bit, for the same reason as probe.
func (f *Filter) add() {
	g := &f.gens[f.newest]
	words := g.words
	var ones uint64
	for _, l := range f.locs {
		w := &words[l>>6]
		old := *w
		*w = old | 1<<(l&63)
		ones += (^old >> (l & 63)) & 1
	}
	g.ones += ones
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
