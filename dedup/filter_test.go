package dedup

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// A step of a scripted test: Check an ID (with or without the caller's exact
// record confirming it), mark an ID Completed, or Check n fresh IDs to move
// the window on.
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
		{"the ring forgets its oldest completion", tiny(100, 3, 2), []step{
			check(1, Fresh), check(2, Fresh), check(3, Fresh),
			complete(1), complete(2), complete(3),
			check(1, Suspect), check(2, Duplicate), check(3, Duplicate),
		}},
		{"an ID completed twice outlives its older copy", tiny(100, 3, 2), []step{
			check(1, Fresh), check(2, Fresh),
			complete(1), complete(2), complete(1), // evicts the first copy of 1
			check(1, Duplicate),
			complete(3), // evicts 2
			check(2, Suspect), check(1, Duplicate),
			complete(4), // evicts the second copy of 1
			check(1, Suspect),
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
			for i, s := range tt.steps {
				switch s.op {
				case "check":
					exact := func(uint64) bool { return s.inLog }
					if got := f.Check(s.id, exact); got != s.want {
						t.Fatalf("step %d: Check(%d, inLog=%v) = %v, want %v", i, s.id, s.inLog, got, s.want)
					}
				case "complete":
					f.Completed(s.id)
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
	p := newProbes(id)
	for i := range f.gens {
		if f.probe(&f.gens[i], p) {
			return true
		}
	}
	return false
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
// trims. A Duplicate must always be backed by an exact record, and with that
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
		ring      []uint64                   // model of the ring, oldest first
		recent    = make([]uint64, 0, 20000) // candidates for replays
		fpSuspect int                        // Suspects for never-seen IDs
	)
	ringHas := func(id uint64) bool {
		for _, x := range ring {
			if x == id {
				return true
			}
		}
		return false
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
		backed := inLog[id] || ringHas(id)
		v := f.Check(id, exact)
		switch {
		case v == Duplicate && !completed[id] && !confirmed[id]:
			t.Fatalf("check %d: ID %d dropped as Duplicate but never completed nor confirmed", i, id)
		case v == Duplicate && !exactSaid && !ringHas(id):
			t.Fatalf("check %d: ID %d dropped as Duplicate with no exact record holding it now", i, id)
		case v == Suspect && backed:
			t.Fatalf("check %d: ID %d is Suspect though an exact record holds it", i, id)
		case v == Suspect && !seen[id]:
			fpSuspect++
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
			if ring = append(ring, x); len(ring) > cfg.Exact {
				ring = ring[1:]
			}
		}
	}
	s := f.Stats()
	t.Logf("stats %+v, false-positive suspects %d", s, fpSuspect)
	if s.Suspects == 0 || fpSuspect == 0 {
		t.Errorf("Suspects = %d, of never-seen IDs %d; want both > 0 at FPRate 0.5", s.Suspects, fpSuspect)
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
	for _, p := range []float64{0.01, 0.001} {
		cfg := Config{Window: 20_000, FPRate: p, Generations: 3, Exact: 16}
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
		t.Logf("FPRate %v: measured %.5f, estimated now %.5f, %.1f bits/id", p, got, s.EstimatedFPRate, s.BitsPerID)
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
	if s.BitsPerID < 24 || s.BitsPerID > 26 {
		t.Errorf("default BitsPerID = %.2f, want about 25", s.BitsPerID)
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
	// 1000 IDs of 12 bits each in about 8.7 million bits.
	if want := 1000 * 12 / 8.7e6; math.Abs(s.FillRatio-want) > want/10 {
		t.Errorf("FillRatio %.6f, want about %.6f", s.FillRatio, want)
	}
	if s.EstimatedFPRate <= 0 || s.EstimatedFPRate > 1e-9 {
		t.Errorf("EstimatedFPRate %g with 1000 of 1<<20 IDs", s.EstimatedFPRate)
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

// TestRing compares the ring with a plain FIFO over a small range of IDs, so
// that IDs repeat, probe runs collide and wrap around the table.
func TestRing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, capacity := range []int{1, 2, 3, 8, 13} {
		rg := newRing(capacity)
		var model []uint64
		for i := range 20_000 {
			id := uint64(r.IntN(3 * capacity))
			if r.IntN(4) == 0 {
				id = r.Uint64() // an ID whose home slot is anywhere
			}
			rg.push(id)
			if model = append(model, id); len(model) > capacity {
				model = model[1:]
			}
			if rg.n != len(model) {
				t.Fatalf("cap %d, push %d: ring holds %d, model %d", capacity, i, rg.n, len(model))
			}
			for x := range uint64(3 * capacity) {
				want := false
				for _, m := range model {
					want = want || m == x
				}
				if got := rg.contains(x); got != want {
					t.Fatalf("cap %d, push %d: contains(%d) = %v, want %v; model %v", capacity, i, x, got, want, model)
				}
			}
			for _, m := range model {
				if !rg.contains(m) {
					t.Fatalf("cap %d, push %d: lost %d; model %v", capacity, i, m, model)
				}
			}
		}
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
