package dedup

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// A step of a scripted test: Check an ID (with or without the caller's exact
// record confirming it), mark an ID Completed, Check n fresh IDs to move
// the window on, or complete n other IDs to move the ring on.
type step struct {
	op    string
	id    uint64
	inLog bool
	n     int
	want  Verdict
}

func check(id uint64, want Verdict) step { return step{op: "check", id: id, want: want} }
func checkLogged(id uint64, want Verdict) step {
	return step{op: "check", id: id, inLog: true, want: want}
}
func complete(id uint64) step { return step{op: "complete", id: id} }
func fill(n int) step         { return step{op: "fill", n: n} }
func completeN(n int) step    { return step{op: "completeN", n: n} }

// tiny is small enough that tests can walk through rotations, with a
// false-positive rate low enough that the scripted IDs never hit by chance.
func tiny(window, generations, exact int) Config {
	return Config{Window: window, FPRate: 1e-6, Generations: generations, Exact: exact}
}

func TestCheckScripts(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"first sight is fresh and a logged replay a duplicate", tiny(100, 3, 8), []step{
			check(1, Fresh), checkLogged(1, Duplicate), checkLogged(1, Duplicate),
		}},
		{"a replay after the log trim is confirmed by the ring", tiny(100, 3, 8), []step{
			check(1, Fresh), complete(1), check(1, Duplicate),
		}},
		{"a maybe that nothing confirms is suspect", tiny(100, 3, 8), []step{
			check(1, Fresh), check(1, Suspect), check(1, Suspect), checkLogged(1, Duplicate),
		}},
		{"ID 0 is an ordinary ID", tiny(100, 3, 8), []step{
			check(0, Fresh), check(0, Suspect), complete(0), check(0, Duplicate),
		}},
		// Exact 2 makes 3 blocks of 1: the ring holds exactly the last 3.
		{"the ring forgets a completion once blocks*perBlock follow it", tiny(100, 3, 2), []step{
			check(1, Fresh), check(2, Fresh), check(3, Fresh),
			complete(1), complete(2), complete(3),
			check(1, Duplicate), check(2, Duplicate), check(3, Duplicate),
			complete(4), // clears the block of 1
			check(1, Suspect), check(2, Duplicate), check(3, Duplicate),
		}},
		// Exact 30 makes 16 blocks of 2: 1 is the first completion of a
		// block, which is cleared by the 33rd completion, 32 after it.
		{"the ring remembers a completion for Exact and up to blocks*perBlock-1 later ones", tiny(100, 3, 30), []step{
			check(1, Fresh), complete(1), completeN(29), check(1, Duplicate),
			completeN(2), check(1, Duplicate),
			completeN(1), check(1, Suspect),
		}},
		// 1's second completion, the 22nd, shares a block with the 21st, so
		// it goes with the 53rd, 31 after it.
		{"an ID completed twice is remembered from its latest completion", tiny(100, 3, 30), []step{
			check(1, Fresh), complete(1), completeN(20), complete(1),
			completeN(29), // the block of the first copy is long gone
			check(1, Duplicate),
			completeN(1), check(1, Duplicate),
			completeN(1), check(1, Suspect),
		}},
		{"an ID completed twice in a row counts twice", tiny(100, 3, 2), []step{
			check(1, Fresh), complete(1), complete(1), complete(2),
			check(1, Duplicate),
			complete(3), // clears the block of the first 1, not the second
			check(1, Duplicate),
			complete(4), check(1, Suspect),
		}},
		// Window 100 in 3 generations of 50: the window covers between 100
		// and 150 IDs.
		{"an ID is remembered for the whole window", tiny(100, 3, 8), []step{
			check(1, Fresh), fill(99), check(1, Suspect),
		}},
		{"an ID is remembered until its generation is dropped", tiny(100, 3, 8), []step{
			check(1, Fresh), fill(148), check(1, Suspect),
		}},
		{"rotation forgets IDs older than the window", tiny(100, 3, 8), []step{
			check(1, Fresh), fill(149), check(1, Fresh),
		}},
		{"rotation forgets even completed IDs", tiny(100, 2, 8), []step{
			check(1, Fresh), complete(1), fill(199), check(1, Fresh),
		}},
		{"a suspect is remembered from its latest sighting", tiny(100, 3, 8), []step{
			check(1, Fresh), fill(99), check(1, Suspect), // 1 moves to the newest
			fill(99), check(1, Suspect),
		}},
		{"a duplicate is remembered from its latest sighting", tiny(100, 3, 8), []step{
			check(1, Fresh), complete(1), fill(99), check(1, Duplicate),
			fill(99), check(1, Duplicate),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			nextFill := uint64(1) << 63 // fill IDs never meet the scripted ones
			nextDone := uint64(1) << 62 // nor do other completions
			for i, s := range tt.steps {
				switch s.op {
				case "check":
					exact := func(uint64) bool { return s.inLog }
					if got := f.Check(s.id, exact); got != s.want {
						t.Fatalf("step %d: Check(%d, inLog=%v) = %v, want %v", i, s.id, s.inLog, got, s.want)
					}
				case "complete":
					f.Completed(s.id)
				case "completeN":
					for range s.n {
						f.Completed(nextDone)
						nextDone++
					}
				case "fill":
					for range s.n {
						if v := f.Check(nextFill, nil); v != Fresh {
							t.Fatalf("step %d: fill ID %d got %v", i, nextFill, v)
						}
						nextFill++
					}
				}
			}
		})
	}
}

// mayContain probes the generations without adding anything.
func (f *Filter) mayContain(id uint64) bool {
	f.locate(id)
	_, maybe := f.probe()
	return maybe
}

// TestWindowBounds checks the promise of Config.Generations at every step:
// the last Window IDs are always remembered, and nothing older than
// Window*Generations/(Generations-1) IDs is.
func TestWindowBounds(t *testing.T) {
	for _, cfg := range []Config{tiny(100, 2, 8), tiny(100, 3, 8), tiny(101, 4, 8), tiny(7, 5, 8)} {
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		most := cfg.perGeneration() * cfg.Generations
		for n := range uint64(5 * most) {
			f.Check(n, nil)
			for back := range uint64(most + 5) {
				if back > n {
					break
				}
				id := n - back
				if got := f.mayContain(id); back < uint64(cfg.Window) && !got {
					t.Fatalf("%+v: after %d adds, ID %d (%d back) is forgotten inside the window", cfg, n+1, id, back)
				} else if back >= uint64(most) && got {
					t.Fatalf("%+v: after %d adds, ID %d (%d back) is remembered beyond %d", cfg, n+1, id, back, most)
				}
			}
		}
	}
}

// TestNoFalseDrops runs a filter with about one false positive in two and a
// small ring through random traffic: fresh IDs, replays, logged inputs and
// trims. A Duplicate must always be backed by an exact record: the caller's,
// or a completion recent enough that the ring may still hold it. A Suspect
// must never be one of the last Exact completions or in the log. With that
// many false positives, Suspects must occur.
func TestNoFalseDrops(t *testing.T) {
	cfg := Config{Window: 1000, FPRate: 0.5, Generations: 3, Exact: 64}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 11))

	var (
		seen      = map[uint64]bool{}        // ever checked
		completed = map[uint64]bool{}        // ever Completed
		confirmed = map[uint64]bool{}        // exact ever said yes
		inLog     = map[uint64]bool{}        // the caller's exact record now
		logOrder  []uint64                   // inLog in arrival order, for trims
		lastDone  = map[uint64]int{}         // index of an ID's latest completion
		nDone     int                        // completions so far
		recent    = make([]uint64, 0, 20000) // candidates for replays
		fpSuspect int                        // Suspects for never-seen IDs
		windowHit int                        // ring hits between Exact and the most back
		forgotten int                        // Suspects completed beyond the most back
	)
	blocks, perBlock := cfg.exactBlocks()
	most := blocks * perBlock
	// back is how many completions came after id's latest, or -1 if id was
	// never completed.
	back := func(id uint64) int {
		j, ok := lastDone[id]
		if !ok {
			return -1
		}
		return nDone - 1 - j
	}
	for i := range 100_000 {
		var id uint64
		if len(recent) > 0 && r.IntN(10) < 3 {
			id = recent[r.IntN(len(recent))]
		} else {
			id = r.Uint64()
		}
		exactSaid := false
		exact := func(x uint64) bool {
			if x != id {
				t.Fatalf("exact called with %d while checking %d", x, id)
			}
			exactSaid = inLog[x]
			if exactSaid {
				confirmed[x] = true
			}
			return exactSaid
		}
		b := back(id)
		mustRing := b >= 0 && b < cfg.Exact // among the last Exact completions
		mayRing := b >= 0 && b < most       // not older than the ring can hold
		v := f.Check(id, exact)
		switch {
		case v == Duplicate && !completed[id] && !confirmed[id]:
			t.Fatalf("check %d: ID %d dropped as Duplicate but never completed nor confirmed", i, id)
		case v == Duplicate && !exactSaid && !mayRing:
			t.Fatalf("check %d: ID %d dropped as Duplicate by the ring %d completions after its latest, beyond the %d it may hold", i, id, b, most)
		case v == Suspect && (inLog[id] || mustRing):
			t.Fatalf("check %d: ID %d is Suspect though an exact record holds it (in log %v, %d completions back)", i, id, inLog[id], b)
		case v == Suspect && !seen[id]:
			fpSuspect++
		case v == Duplicate && !exactSaid && !mustRing:
			windowHit++
		case v == Suspect && b >= most:
			forgotten++
		}
		seen[id] = true
		if len(recent) < cap(recent) {
			recent = append(recent, id)
		} else {
			recent[r.IntN(len(recent))] = id
		}
		// A processed input is logged until its tree completes.
		if v != Duplicate && !inLog[id] {
			inLog[id] = true
			logOrder = append(logOrder, id)
		}
		// Trim the oldest logged inputs, as completions come in.
		for len(logOrder) > 50 || (len(logOrder) > 0 && r.IntN(2) == 0) {
			x := logOrder[0]
			logOrder = logOrder[1:]
			delete(inLog, x)
			f.Completed(x)
			completed[x] = true
			lastDone[x] = nDone
			nDone++
		}
	}
	s := f.Stats()
	t.Logf("stats %+v, false-positive suspects %d, ring hits beyond Exact %d, forgotten completions %d", s, fpSuspect, windowHit, forgotten)
	if s.Suspects == 0 || fpSuspect == 0 {
		t.Errorf("Suspects = %d, of never-seen IDs %d; want both > 0 at FPRate 0.5", s.Suspects, fpSuspect)
	}
	if forgotten == 0 {
		t.Errorf("no replay of a completion the ring had forgotten; the test does not exercise the ring's bound")
	}
	if s.Duplicates == 0 {
		t.Errorf("no Duplicates at all; the test does not exercise confirmation")
	}
	if s.Checked != 100_000 || s.New+s.Duplicates+s.Suspects != s.Checked {
		t.Errorf("counters do not add up: %+v", s)
	}
}

// TestFalsePositiveRate measures the rate of Suspects among never-seen IDs
// in steady state against the configured FPRate and the estimate in Stats.
func TestFalsePositiveRate(t *testing.T) {
	// Every size of a generation's piece of a unit: 4 words (2
	// generations), 2 (3 and 4) and 1 (6).
	for _, c := range []struct {
		p    float64
		gens int
	}{{0.01, 3}, {0.001, 3}, {0.001, 2}, {0.001, 4}, {0.001, 6}} {
		p := c.p
		cfg := Config{Window: 20_000, FPRate: p, Generations: c.gens, Exact: 16}
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(3, 5))
		for range 3 * cfg.Window {
			f.Check(r.Uint64(), nil)
		}
		const n = 200_000
		before := f.Stats().Suspects
		for range n {
			f.Check(r.Uint64(), nil)
		}
		s := f.Stats()
		got := float64(s.Suspects-before) / n
		t.Logf("FPRate %v, %d generations: measured %.5f, estimated now %.5f, %.1f bits/id", p, c.gens, got, s.EstimatedFPRate, s.BitsPerID)
		if got > 1.3*p {
			t.Errorf("FPRate %v: measured false-positive rate %.5f", p, got)
		}
		if s.EstimatedFPRate <= 0 || s.EstimatedFPRate > 1.3*p {
			t.Errorf("FPRate %v: EstimatedFPRate %.5f", p, s.EstimatedFPRate)
		}
	}
}

func TestStats(t *testing.T) {
	f, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := f.Stats()
	if s != (Stats{BitsPerID: s.BitsPerID}) {
		t.Errorf("fresh filter has stats %+v", s)
	}
	if s.BitsPerID < 35 || s.BitsPerID > 36 {
		t.Errorf("default BitsPerID = %.2f, want about 35.5", s.BitsPerID)
	}
	for id := range uint64(1000) {
		f.Check(id, nil)
	}
	f.Check(1, func(uint64) bool { return true })
	f.Check(2, nil)
	f.Completed(3)
	f.Completed(3)
	s = f.Stats()
	if s.Checked != 1002 || s.New != 1000 || s.Duplicates != 1 || s.Suspects != 1 {
		t.Errorf("counters %+v", s)
	}
	if s.Remembered != 1000 || s.ExactLen != 2 {
		t.Errorf("Remembered %d, ExactLen %d; want 1000 and 2", s.Remembered, s.ExactLen)
	}
	// 1000 IDs of k bits each in a generation's bits (10, five in each of
	// two words, and about 9 million). Two of an ID's five bits in a word
	// can be the same one, so a little under k.
	k := f.rounds * f.sub
	if want := 1000 * float64(k) / float64(f.genBits()); k != 10 || math.Abs(s.FillRatio-want) > want/10 {
		t.Errorf("FillRatio %.6f, want about %.6f", s.FillRatio, want)
	}
	if s.EstimatedFPRate <= 0 || s.EstimatedFPRate > 1e-9 {
		t.Errorf("EstimatedFPRate %g with 1000 of 1<<20 IDs", s.EstimatedFPRate)
	}
}

// TestUnitIsOneCacheLine: with the default's four generations an ID's
// bits in all of them lie in one 64-byte line, which is what makes a
// check one cache miss (the heap aligns the bitset, a large object, to a
// page).
func TestUnitIsOneCacheLine(t *testing.T) {
	for _, c := range []struct{ gens, unit int }{{2, 8}, {3, 6}, {4, 8}, {5, 5}, {8, 8}, {12, 12}} {
		cfg := DefaultConfig()
		cfg.Generations = c.gens
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if f.unit != c.unit || f.sub*c.gens != f.unit {
			t.Errorf("%d generations: units of %d words (%d each), want %d", c.gens, f.unit, f.sub, c.unit)
		}
	}
	f, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if addr := uintptr(unsafe.Pointer(&f.words[0])); addr%64 != 0 || f.unit != lineWords {
		t.Fatalf("the default's units are %d words from address %#x; want one aligned line each", f.unit, addr)
	}
	for _, id := range []uint64{0, 1, 2, 1 << 40, ^uint64(0)} {
		f.locate(id)
		if f.base%lineWords != 0 || f.base+lineWords > uint64(len(f.words)) {
			t.Errorf("ID %#x: unit at word %d of %d", id, f.base, len(f.words))
		}
	}
}

func TestNoAllocations(t *testing.T) {
	f, err := New(tiny(1000, 3, 100))
	if err != nil {
		t.Fatal(err)
	}
	logged := func(id uint64) bool { return id%2 == 0 }
	var id uint64
	allocs := testing.AllocsPerRun(10_000, func() {
		f.Check(id, logged)
		f.Check(id, logged)
		f.Completed(id)
		id++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Check, Check, Completed", allocs)
	}
}

// TestRing compares the ring with a model of its promise made exact:
// completion c (counting from 0) goes into the block of epoch c/perBlock,
// and the ring holds the last `blocks` epochs. IDs come from a small range,
// so that they repeat, probe runs collide and wrap around a block's table;
// the model is checked against the bounds of Config.Exact as it goes.
func TestRing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, exact := range []int{1, 2, 3, 8, 13, 14, 15, 16, 30, 31, 100, 1000} {
		cfg := tiny(100, 3, exact)
		blocks, perBlock := cfg.exactBlocks()
		if blocks < 2 || blocks > maxExactBlocks || (blocks-1)*perBlock < exact {
			t.Fatalf("Exact %d: %d blocks of %d cannot keep the last Exact", exact, blocks, perBlock)
		}
		rg := newRing(cfg)
		var (
			hist  []uint64           // every completion, oldest first
			first int                // index in hist of the oldest the ring holds
			held  = map[uint64]int{} // copies of each ID in hist[first:]
		)
		span := uint64(min(3*exact, 300))
		// Four times round the ring, the first to fill it, and more for a
		// small ring.
		for i := range 4*blocks*perBlock + 2000 {
			id := uint64(r.IntN(int(span)))
			if r.IntN(4) == 0 {
				id = r.Uint64() // an ID whose home slot is anywhere
			}
			rg.push(id)
			hist = append(hist, id)
			held[id]++
			epoch := (len(hist) - 1) / perBlock
			for ; first < (epoch-blocks+1)*perBlock; first++ {
				x := hist[first]
				if held[x]--; held[x] == 0 {
					delete(held, x)
					if rg.contains(x) {
						t.Fatalf("Exact %d, push %d: still holds %d, completed %d pushes ago", exact, i, x, len(hist)-1-first)
					}
				}
			}
			n := len(hist) - first
			if n < min(len(hist), exact) || n > blocks*perBlock {
				t.Fatalf("Exact %d, push %d: the model holds %d completions, outside [%d, %d]", exact, i, n, min(len(hist), exact), blocks*perBlock)
			}
			if rg.len() != n {
				t.Fatalf("Exact %d, push %d: ring holds %d completions, model %d", exact, i, rg.len(), n)
			}
			for x := range span {
				if got, want := rg.contains(x), held[x] > 0; got != want {
					t.Fatalf("Exact %d, push %d: contains(%d) = %v, want %v", exact, i, x, got, want)
				}
			}
			for _, x := range hist[first:] {
				if !rg.contains(x) {
					t.Fatalf("Exact %d, push %d: lost %d", exact, i, x)
				}
			}
		}
	}
}

// TestRingSpill fills one bucket of a block past its room, which random
// IDs practically never do and one ID completed over and over does: the
// IDs beyond the room go to the block's spill, are found there, and are
// forgotten with the block.
func TestRingSpill(t *testing.T) {
	cfg := tiny(100, 3, 15*4*meanFill) // 16 blocks of 4 buckets
	rg := newRing(cfg)
	if rg.buckets != 4 || rg.room != 2*meanFill {
		t.Fatalf("%d buckets of %d; the test wants 4 of %d", rg.buckets, rg.room, 2*meanFill)
	}
	r := rand.New(rand.NewPCG(3, 4))
	same := r.Uint64()
	var other uint64 // another ID of the same bucket, first completed once the bucket is full
	for other = r.Uint64(); other == same || rg.bucket(other) != rg.bucket(same); other = r.Uint64() {
	}
	for range rg.room + 10 {
		rg.push(same)
	}
	rg.push(other)
	b := &rg.blocks[rg.cur]
	if _, ok := b.spill[other]; !ok || int(b.fill[rg.bucket(same)]) != rg.room {
		t.Fatalf("bucket filled to %d of %d, spill %v; want the bucket full and %d in the spill", b.fill[rg.bucket(same)], rg.room, b.spill, other)
	}
	if !rg.contains(same) || !rg.contains(other) || rg.len() != rg.room+11 {
		t.Fatalf("contains(same) %v, contains(other) %v, len %d; want both held and %d completions", rg.contains(same), rg.contains(other), rg.len(), rg.room+11)
	}
	// Fill the ring with fresh IDs until the block that spilled is emptied.
	spilled, pushes := rg.cur, 0
	for emptied := false; !emptied; {
		prev := rg.cur
		rg.push(r.Uint64())
		pushes++
		emptied = rg.cur == spilled && prev != spilled
		if rg.contains(same) == emptied {
			t.Fatalf("after %d more pushes, contains(same) = %v with block %d current (the spilled block is %d)", pushes, rg.contains(same), rg.cur, spilled)
		}
	}
	if rg.contains(other) || rg.blocks[spilled].spill != nil {
		t.Fatalf("the emptied block still holds its spill: contains(other) %v, spill %v", rg.contains(other), rg.blocks[spilled].spill)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	with := func(change func(*Config)) Config {
		c := DefaultConfig()
		change(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want string // the field the error must name
	}{
		{"zero config", Config{}, "Window"},
		{"negative window", with(func(c *Config) { c.Window = -1 }), "Window"},
		{"zero FPRate", with(func(c *Config) { c.FPRate = 0 }), "FPRate"},
		{"FPRate 1", with(func(c *Config) { c.FPRate = 1 }), "FPRate"},
		{"NaN FPRate", with(func(c *Config) { c.FPRate = math.NaN() }), "FPRate"},
		{"one generation", with(func(c *Config) { c.Generations = 1 }), "Generations"},
		{"window smaller than generations", with(func(c *Config) { c.Window, c.Generations = 2, 4 }), "Generations-1"},
		{"zero exact", with(func(c *Config) { c.Exact = 0 }), "Exact"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil", tt.cfg)
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(msg, "dedup: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("Validate(%+v) = %q; want an ErrInvalidConfig naming %s", tt.cfg, msg, tt.want)
			}
			if f, nerr := New(tt.cfg); f != nil || nerr == nil || nerr.Error() != msg {
				t.Errorf("New(%+v) = %v, %v; want nil and the Validate error", tt.cfg, f, nerr)
			}
		})
	}
}

// TestMemoryGrowsWithUse: New takes the Bloom generations, which share
// one bitset, and one block of the ring; the rest of the ring comes as it
// first rotates into each block, so a task that completes few inputs (a
// short run, one of hundreds of small tasks) does not hold the full 23 MB
// of the default config.
func TestMemoryGrowsWithUse(t *testing.T) {
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	cfg := DefaultConfig()
	before := heap()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fresh := heap() - before
	bloomBytes := f.Stats().BitsPerID * float64(cfg.Window) / 8
	if float64(fresh) > bloomBytes+2<<20 {
		t.Fatalf("a new filter holds %d bytes; the generations and one block of the ring are about %.0f", fresh, bloomBytes+1.2*(1<<20))
	}
	for i := range uint64(2 * cfg.Window) {
		f.Check(i, nil)
		f.Completed(i)
	}
	full := heap() - before
	if float64(full) < bloomBytes+16<<20 {
		t.Fatalf("a filter that saw two windows holds %d bytes; want the generations and every block (%.0f bytes of Bloom filters and 18 MB of ring)", full, bloomBytes)
	}
	t.Logf("default config: %d bytes new, %d after two windows", fresh, full)
	runtime.KeepAlive(f)
}

// TestPrefetchChangesNothing checks the same IDs in two filters, one of
// which prefetches each ID (and an unrelated one) first: the verdicts and
// stats are the same.
func TestPrefetchChangesNothing(t *testing.T) {
	a, _ := New(tiny(500, 3, 64))
	b, _ := New(tiny(500, 3, 64))
	r := rand.New(rand.NewPCG(1, 9))
	var ids []uint64
	for i := range 5000 {
		id := r.Uint64()
		if i%3 == 0 && len(ids) > 0 {
			id = ids[r.IntN(len(ids))] // a replay
		}
		ids = append(ids, id)
		if i%2 == 0 {
			b.Prefetch(id)
			b.Prefetch(r.Uint64())
		} else {
			b.PrefetchAll([]uint64{r.Uint64(), id, r.Uint64()})
		}
		logged := func(x uint64) bool { return x%5 == 0 }
		if va, vb := a.Check(id, logged), b.Check(id, logged); va != vb {
			t.Fatalf("check %d of %x: %v without prefetch, %v with", i, id, va, vb)
		}
		if i%2 == 0 {
			a.Completed(id)
			b.Completed(id)
		}
	}
	if sa, sb := a.Stats(), b.Stats(); sa != sb {
		t.Fatalf("stats differ: %+v and %+v", sa, sb)
	}
}

// TestSeenPairIsLocateAndProbe: the unrolled path of sub-blocks of two
// words takes the same unit and bits as the general one, and answers the
// same, for every number of rounds it takes (rates from high to low) and
// for three and four generations, with the filter filling and rotating.
func TestSeenPairIsLocateAndProbe(t *testing.T) {
	rounds := map[int]bool{}
	for _, gens := range []int{3, 4} {
		for _, rate := range []float64{0.9, 0.6, 0.3, 0.1, 0.03, 0.01, 0.003, 0.00085, 0.0001} {
			f, err := New(Config{Window: 3000, FPRate: rate, Generations: gens, Exact: 100})
			if err != nil {
				t.Fatal(err)
			}
			if !f.pair {
				continue // more rounds than one hash holds: the general path only
			}
			rounds[f.rounds] = true
			r := rand.New(rand.NewPCG(uint64(gens), math.Float64bits(rate)))
			for i := range 20_000 {
				id := r.Uint64()
				if i%4 == 0 {
					id = uint64(i) // counters too
				}
				inNewest, maybe := f.seenPair(id)
				base, mask := f.base, f.mask
				f.locate(id)
				wantNewest, wantMaybe := f.probe()
				if base != f.base || mask != f.mask || inNewest != wantNewest || maybe != wantMaybe {
					t.Fatalf("%d generations at %v (%d rounds), ID %x: seenPair gives unit word %d, bits %x, %v %v; locate and probe %d, %x, %v %v",
						gens, rate, f.rounds, id, base, mask, inNewest, maybe, f.base, f.mask, wantNewest, wantMaybe)
				}
				f.Check(id, nil)
			}
		}
	}
	for r := 1; r <= 5; r++ {
		if !rounds[r] {
			t.Errorf("no config tried takes %d rounds; rounds tried: %v", r, rounds)
		}
	}
}

// TestDefaultSizing checks the sizes New takes for DefaultConfig without
// computing them against the computation.
func TestDefaultSizing(t *testing.T) {
	k := defaultSizingKey()
	m, rounds := computeSizing(k.n, k.p, k.sub)
	if got := (sized{m, rounds}); got != defaultSizing {
		t.Fatalf("DefaultConfig sizes to %d bits per generation in %d rounds; defaultSizing says %d in %d: update defaultSizing", m, rounds, defaultSizing.m, defaultSizing.rounds)
	}
}
