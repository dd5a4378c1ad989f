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

	ring ring

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

// New returns an empty Filter. It allocates all its memory here, about
// BitsPerID*Window/8 bytes of Bloom filters plus 32 to 56 bytes per Exact
// slot (for the default config 3.3 MB plus 2 MB), so that Check and
// Completed never do.
func New(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Filter{cfg: cfg, perGen: cfg.perGeneration(), ring: newRing(cfg.Exact)}
	f.gens = make([]generation, cfg.Generations)
	p := cfg.FPRate / float64(cfg.Generations)
	for i := range f.gens {
		// All generations get the same m and k, so an ID probes the same
		// bit positions in each and one hash serves them all.
		bf := bloom.NewWithEstimates(uint(f.perGen), p)
		f.gens[i] = generation{bf: bf, words: bf.BitSet().Words()}
	}
	f.m = uint64(f.gens[0].bf.Cap())
	f.k = int(f.gens[0].bf.K())
	return f, nil
}

// Check classifies a record ID. exact is the caller's own exact record, for
// example its output-log index ("is this input still in my log?"); it may be
// nil. Check never returns Duplicate unless exact(id) is true or id is in the
// ring of recent completions, so a Bloom false positive costs an exact lookup
// and a Suspect, never a dropped record.
//
// After Check the ID is in the newest generation whatever the verdict. A
// replayed ID may well come again (another failure, a late copy from NATS),
// and restarting its window now keeps it findable for as long as its newest
// exact record (outputs logged again, a later Completed) can confirm it.
func (f *Filter) Check(id uint64, exact func(uint64) bool) Verdict {
	f.checked++
	p := newProbes(id)
	inNewest := f.probe(&f.gens[f.newest], p)
	maybe := inNewest
	for i, j := 1, f.newest; i < len(f.gens) && !maybe; i++ {
		if j--; j < 0 { // walking back from the newest without a modulo
			j = len(f.gens) - 1
		}
		maybe = f.probe(&f.gens[j], p)
	}
	if !maybe {
		f.add(p)
		f.fresh++
		return Fresh
	}
	if !inNewest {
		f.add(p)
	}
	// The ring first: it is a few nanoseconds and needs no call through a
	// func value.
	if f.ring.contains(id) || (exact != nil && exact(id)) {
		f.duplicates++
		return Duplicate
	}
	f.suspects++
	return Suspect
}

// Completed remembers id exactly in the ring of recent completions. The
// caller calls it when it trims id's log entry, so that a replay arriving
// after the trim is still confirmed. The ring is FIFO: when it is full the
// oldest completion falls out. An ID completed twice stays until both copies
// have fallen out.
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
	// ExactLen is the number of completions in the ring, copies included.
	ExactLen int
}

// Stats returns the counters and gauges; it costs O(Generations).
func (f *Filter) Stats() Stats {
	s := Stats{
		Checked:    f.checked,
		New:        f.fresh,
		Duplicates: f.duplicates,
		Suspects:   f.suspects,
		FillRatio:  float64(f.gens[f.newest].ones) / float64(f.m),
		BitsPerID:  float64(f.m) * float64(len(f.gens)) / float64(f.cfg.Window),
		ExactLen:   f.ring.n,
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
func (f *Filter) probe(g *generation, p probes) bool {
	words, m, x := g.words, f.m, p.x
	all := uint64(1)
	for i := range f.k {
		x = x*lcgMul + p.inc
		l := loc(x, m)
		all &= words[l>>6] >> (l & 63)
		if i&3 == 3 && all&1 == 0 {
			return false
		}
	}
	return all&1 != 0
}

// add puts the ID into the newest generation and rotates when that
// generation is full. The caller knows the ID is not there yet. It counts
// the bits it sets without a branch per bit, for the same reason as probe.
func (f *Filter) add(p probes) {
	g := &f.gens[f.newest]
	words, m, x := g.words, f.m, p.x
	var ones uint64
	for range f.k {
		x = x*lcgMul + p.inc
		l := loc(x, m)
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
// the newest: no allocation, one memclr of m/8 bytes every perGen adds.
func (f *Filter) rotate() {
	if f.newest++; f.newest == len(f.gens) {
		f.newest = 0
	}
	g := &f.gens[f.newest]
	g.bf.ClearAll()
	g.ids, g.ones = 0, 0
}

// ring is the FIFO of recent completions with a multiset for membership.
type ring struct {
	ids  []uint64 // fixed capacity; ids[head] is the next slot to write
	head int
	n    int
	set  idSet
}

func newRing(capacity int) ring {
	return ring{ids: make([]uint64, capacity), set: newIDSet(capacity)}
}

func (r *ring) push(id uint64) {
	if r.n == len(r.ids) {
		r.set.remove(r.ids[r.head])
	} else {
		r.n++
	}
	r.ids[r.head] = id
	r.set.add(id)
	if r.head++; r.head == len(r.ids) {
		r.head = 0
	}
}

func (r *ring) contains(id uint64) bool { return r.set.contains(id) }

// idSet is a multiset of IDs: open addressing with linear probing, at most
// half full, with a reference count per ID so that the ring's eviction of an
// older copy of an ID does not forget a newer one. A Go map would do the
// same job but costs more per operation and, as deletions and insertions
// churn, occasionally reallocates; this table never grows because the ring
// bounds the number of distinct IDs.
type idSet struct {
	keys  []uint64
	refs  []uint32 // 0 marks an empty slot, so ID 0 needs no special case
	shift uint     // 64 - log2(len(keys))
}

func newIDSet(maxIDs int) idSet {
	size := 2
	for size < 2*maxIDs {
		size <<= 1
	}
	return idSet{
		keys:  make([]uint64, size),
		refs:  make([]uint32, size),
		shift: uint(64 - bits.TrailingZeros(uint(size))),
	}
}

// home is the ID's preferred slot: Fibonacci hashing takes the top bits of
// a multiply, which spreads counters as well as hashes.
func (s *idSet) home(id uint64) int {
	return int((id * 0x9e3779b97f4a7c15) >> s.shift)
}

// find returns the slot holding id, or the empty slot where it would go.
func (s *idSet) find(id uint64) (slot int, found bool) {
	mask := len(s.keys) - 1
	for i := s.home(id); ; i = (i + 1) & mask {
		if s.refs[i] == 0 {
			return i, false
		}
		if s.keys[i] == id {
			return i, true
		}
	}
}

func (s *idSet) contains(id uint64) bool {
	_, ok := s.find(id)
	return ok
}

func (s *idSet) add(id uint64) {
	i, _ := s.find(id)
	s.keys[i] = id
	s.refs[i]++
}

// remove drops one reference to id, which must be present. When the last
// goes, the entries after it in its probe run shift back (backward-shift
// deletion) so that lookups need no tombstones and never slow down.
func (s *idSet) remove(id uint64) {
	i, ok := s.find(id)
	if !ok {
		return
	}
	if s.refs[i]--; s.refs[i] > 0 {
		return
	}
	mask := len(s.keys) - 1
	for j := (i + 1) & mask; s.refs[j] != 0; j = (j + 1) & mask {
		// The entry at j may move into the hole at i only if its home is
		// not cyclically within (i, j]; otherwise a lookup starting at its
		// home would stop at the hole before reaching it.
		h := s.home(s.keys[j])
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			s.keys[i], s.refs[i] = s.keys[j], s.refs[j]
			s.refs[j] = 0
			i = j
		}
	}
	s.refs[i] = 0
}
