package upstreambackup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/wire"
)

var t0 = time.Unix(1_700_000_000, 0)

// out builds an output to dst whose record carries an anchor, so that tests
// see Append drop it.
func out(dst int32, id uint64) Output {
	return Output{Dst: dst, Rec: wire.Record{
		ID: id, Stream: "default", SrcTask: 1, Epoch: 3,
		Anchors: []wire.Anchor{{Tree: 99, Val: id}},
		Values:  []any{int64(id)},
	}}
}

// logged is out as the log keeps it: without anchors.
func logged(dst int32, id uint64) Output {
	o := out(dst, id)
	o.Rec.Anchors = nil
	return o
}

func newLog(t testing.TB, cfg Config) *Log {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestConfig(t *testing.T) {
	if d := DefaultConfig(); d.MaxEntries != 1<<18 || d.MaxBytes != 64<<20 {
		t.Errorf("DefaultConfig() = %+v, want 1<<18 entries and 64 MiB", d)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty means valid
	}{
		{name: "default", cfg: DefaultConfig()},
		{name: "smallest", cfg: Config{MaxEntries: 1, MaxBytes: 1}},
		{name: "zero value", cfg: Config{}, wantErr: "MaxEntries must be positive"},
		{name: "negative entries", cfg: Config{MaxEntries: -1, MaxBytes: 1}, wantErr: "MaxEntries must be positive"},
		{name: "zero bytes", cfg: Config{MaxEntries: 1}, wantErr: "MaxBytes must be positive"},
		{name: "negative bytes", cfg: Config{MaxEntries: 1, MaxBytes: -5}, wantErr: "MaxBytes must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			l, newErr := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || newErr != nil || l == nil {
					t.Fatalf("Validate() = %v, New() = %v, %v; want a Log and no errors", err, l, newErr)
				}
				return
			}
			for _, e := range []error{err, newErr} {
				if e == nil {
					t.Fatalf("Validate() = %v, New() error = %v; want errors containing %q", err, newErr, tt.wantErr)
				}
				if !errors.Is(e, ErrInvalidConfig) {
					t.Errorf("error %q does not wrap ErrInvalidConfig", e)
				}
				if !strings.HasPrefix(e.Error(), "upstreambackup: ") || !strings.Contains(e.Error(), tt.wantErr) {
					t.Errorf("error %q: want prefix %q and %q in it", e, "upstreambackup: ", tt.wantErr)
				}
			}
			if l != nil {
				t.Errorf("New returned a Log with an error")
			}
		})
	}
}

// step is one call on a Log in TestOperations. Exactly one of the op
// fields is set.
type step struct {
	appendIn *appendArgs
	link     *[2]uint64 // input, tree
	complete *completeArgs
}

type appendArgs struct {
	input uint64
	trees []uint64
	outs  []Output
	size  int
}

type completeArgs struct {
	tree uint64
	want []uint64 // inputs trimmed, in any order
}

func app(input uint64, trees []uint64, size int, outs ...Output) step {
	return step{appendIn: &appendArgs{input, trees, outs, size}}
}
func lnk(input, tree uint64) step { return step{link: &[2]uint64{input, tree}} }
func cpl(tree uint64, want ...uint64) step {
	return step{complete: &completeArgs{tree, want}}
}

func TestOperations(t *testing.T) {
	tests := []struct {
		name    string
		steps   []step
		outputs map[uint64][]Output // inputs that must have an entry, with its outputs
		absent  []uint64            // inputs that must not have an entry
		bytes   int64
	}{
		{
			name:    "append creates an entry without anchors",
			steps:   []step{app(1, []uint64{10}, 30, out(7, 100), out(8, 101))},
			outputs: map[uint64][]Output{1: {logged(7, 100), logged(8, 101)}},
			absent:  []uint64{2},
			bytes:   30,
		},
		{
			name:    "no outputs still records the input",
			steps:   []step{app(1, []uint64{10}, 0)},
			outputs: map[uint64][]Output{1: nil},
		},
		{
			name:    "append extends an entry in order and adds sizes",
			steps:   []step{app(1, []uint64{10}, 10, out(7, 100)), app(1, nil, 5, out(8, 101)), app(1, []uint64{10}, 0, out(7, 102))},
			outputs: map[uint64][]Output{1: {logged(7, 100), logged(8, 101), logged(7, 102)}},
			bytes:   15,
		},
		{
			name:    "negative size counts as zero",
			steps:   []step{app(1, []uint64{10}, 10), app(1, nil, -4)},
			outputs: map[uint64][]Output{1: nil},
			bytes:   10,
		},
		{
			name:   "a tree listed twice links once",
			steps:  []step{app(1, []uint64{10, 10}, 1), lnk(1, 10), cpl(10, 1), cpl(10)},
			absent: []uint64{1},
		},
		{
			name:   "link without an entry is a no-op",
			steps:  []step{lnk(5, 10), cpl(10)},
			absent: []uint64{5},
		},
		{
			name:    "complete removes every input of the tree and no other",
			steps:   []step{app(1, []uint64{10}, 1), app(2, []uint64{10}, 2), app(3, []uint64{11}, 4), app(4, []uint64{10}, 8), cpl(10, 1, 2, 4)},
			outputs: map[uint64][]Output{3: nil},
			absent:  []uint64{1, 2, 4},
			bytes:   4,
		},
		{
			name:    "complete of an unknown tree is a no-op",
			steps:   []step{app(1, []uint64{10}, 3, out(7, 100)), cpl(12)},
			outputs: map[uint64][]Output{1: {logged(7, 100)}},
			bytes:   3,
		},
		{
			name:   "entry of two trees goes with the first; the second tree no longer lists it",
			steps:  []step{app(1, []uint64{10}, 1), lnk(1, 11), app(2, []uint64{11}, 2), cpl(10, 1), cpl(11, 2), cpl(10)},
			absent: []uint64{1, 2},
		},
		{
			name:   "entry of two trees goes with the second; the first tree no longer lists it",
			steps:  []step{app(1, []uint64{10}, 1), lnk(1, 11), app(2, []uint64{11}, 2), cpl(11, 1, 2), cpl(10)},
			absent: []uint64{1, 2},
		},
		{
			name:   "two trees given to append",
			steps:  []step{app(1, []uint64{10, 11}, 1), app(2, []uint64{10}, 2), cpl(11, 1), cpl(10, 2)},
			absent: []uint64{1, 2},
		},
		{
			name:    "append after complete starts a new entry in its new tree only",
			steps:   []step{app(1, []uint64{10}, 1, out(7, 100)), cpl(10, 1), app(1, []uint64{11}, 2, out(8, 101)), cpl(10)},
			outputs: map[uint64][]Output{1: {logged(8, 101)}},
			bytes:   2,
		},
		{
			name:   "entry without trees leaves only by expiry",
			steps:  []step{app(1, nil, 1), lnk(1, 10), cpl(10, 1)},
			absent: []uint64{1},
		},
		{
			name: "three trees, middle one completes",
			steps: []step{
				app(1, []uint64{10}, 1), lnk(1, 11), lnk(1, 12),
				app(2, []uint64{10}, 1), app(3, []uint64{12}, 1),
				cpl(11, 1), cpl(10, 2), cpl(12, 3),
			},
			absent: []uint64{1, 2, 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t, DefaultConfig())
			for i, s := range tt.steps {
				switch {
				case s.appendIn != nil:
					a := s.appendIn
					l.Append(a.input, a.trees, a.outs, a.size, t0)
				case s.link != nil:
					l.Link(s.link[0], s.link[1])
				case s.complete != nil:
					var got []uint64
					n := l.Complete(s.complete.tree, func(in uint64) { got = append(got, in) })
					slices.Sort(got)
					want := slices.Sorted(slices.Values(s.complete.want))
					if n != len(got) || !slices.Equal(got, want) {
						t.Fatalf("step %d: Complete(%d) = %d trimming %v, want %v", i, s.complete.tree, n, got, want)
					}
				}
				checkInvariants(t, l)
			}
			for in, want := range tt.outputs {
				if !l.Has(in) {
					t.Errorf("Has(%d) = false, want true", in)
				}
				got, ok := l.Outputs(in)
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("Outputs(%d) = %v, %v; want %v, true", in, got, ok, want)
				}
			}
			for _, in := range tt.absent {
				if l.Has(in) {
					t.Errorf("Has(%d) = true, want false", in)
				}
				if got, ok := l.Outputs(in); got != nil || ok {
					t.Errorf("Outputs(%d) = %v, %v; want nil, false", in, got, ok)
				}
			}
			if l.Len() != len(tt.outputs) {
				t.Errorf("Len() = %d, want %d", l.Len(), len(tt.outputs))
			}
			if l.Bytes() != tt.bytes {
				t.Errorf("Bytes() = %d, want %d", l.Bytes(), tt.bytes)
			}
		})
	}
}

func TestAppendLeavesCallerOutputsAlone(t *testing.T) {
	l := newLog(t, DefaultConfig())
	outs := []Output{out(7, 100)}
	l.Append(1, []uint64{10}, outs, 1, t0)
	if len(outs[0].Rec.Anchors) != 1 {
		t.Errorf("Append cleared the caller's anchors")
	}
	outs[0].Dst = 9 // the caller reuses its buffer for the next input
	got, _ := l.Outputs(1)
	if got[0].Dst != 7 {
		t.Errorf("logged output changed with the caller's buffer: Dst = %d", got[0].Dst)
	}
	// A caller appending to the returned slice gets its own copy, which a
	// later Append (growing the entry in place) does not overwrite.
	for id := range uint64(3) {
		l.Append(2, nil, []Output{out(7, 200+id)}, 1, t0)
	}
	got, _ = l.Outputs(2)
	mine := append(got, out(9, 999))
	l.Append(2, nil, []Output{out(7, 203)}, 1, t0)
	if mine[3].Rec.ID != 999 {
		t.Errorf("a later Append overwrote the caller's appended output: %v", mine[3])
	}
}

func TestExpire(t *testing.T) {
	l := newLog(t, DefaultConfig())
	var trimmed []uint64
	expire := func(cutoff time.Time, want ...uint64) {
		t.Helper()
		trimmed = trimmed[:0]
		n := l.Expire(cutoff, func(in uint64, _ int) { trimmed = append(trimmed, in) })
		if n != len(trimmed) || !slices.Equal(trimmed, want) {
			t.Fatalf("Expire(t0+%v) = %d trimming %v, want %v in that order", cutoff.Sub(t0), n, trimmed, want)
		}
		checkInvariants(t, l)
	}
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	l.Append(1, []uint64{10}, []Output{out(7, 100)}, 5, sec(0))
	l.Append(2, []uint64{11}, nil, 0, sec(1))
	l.Append(3, []uint64{12}, nil, 0, sec(2))
	l.Append(4, []uint64{13}, nil, 0, sec(3))
	expire(sec(0)) // strictly older only
	expire(sec(0.5), 1)
	if l.Bytes() != 0 || l.Has(1) {
		t.Fatalf("after expiring 1: Bytes() = %d, Has(1) = %v", l.Bytes(), l.Has(1))
	}
	if n := l.Complete(10, nil); n != 0 {
		t.Fatalf("Complete(10) after expiry removed %d", n)
	}

	// Link refreshes 2 as of the newest time given to Append (3 s), and an
	// Append without outputs refreshes 3 as of its own time.
	l.Link(2, 20)
	l.Append(3, nil, nil, 0, sec(4))
	expire(sec(3.5), 4, 2)
	expire(sec(4))
	expire(sec(5), 3)
	if l.Len() != 0 || len(l.trees) != 0 {
		t.Fatalf("Len() = %d, %d trees indexed; want empty", l.Len(), len(l.trees))
	}

	// A time earlier than one already seen (the wall clock stepped back)
	// ages the entry as of the later time, so it does not expire early and
	// the age list stays ordered.
	l.Append(5, []uint64{14}, nil, 0, sec(10))
	l.Append(6, []uint64{15}, nil, 0, sec(6))
	expire(sec(9))
	expire(sec(11), 5, 6)

	if n := l.Expire(sec(100), nil); n != 0 {
		t.Fatalf("Expire on an empty log = %d", n)
	}
}

func TestForTask(t *testing.T) {
	l := newLog(t, DefaultConfig())
	l.Append(1, []uint64{10}, []Output{out(7, 100), out(8, 101), out(7, 102)}, 3, t0)
	l.Append(2, []uint64{11}, []Output{out(8, 200)}, 1, t0.Add(time.Second))
	l.Append(3, []uint64{12}, []Output{out(7, 300)}, 1, t0.Add(2*time.Second))
	l.Append(4, []uint64{12}, nil, 0, t0.Add(3*time.Second))

	type got struct {
		input uint64
		id    uint64
	}
	collect := func(dst int32) []got {
		var g []got
		l.ForTask(dst, func(in uint64, o Output) {
			if o.Dst != dst || o.Rec.Anchors != nil {
				t.Errorf("ForTask(%d) yielded %+v", dst, o)
			}
			g = append(g, got{in, o.Rec.ID})
		})
		return g
	}
	if g, want := collect(7), []got{{1, 100}, {1, 102}, {3, 300}}; !slices.Equal(g, want) {
		t.Errorf("ForTask(7) = %v, want %v", g, want)
	}
	if g, want := collect(8), []got{{1, 101}, {2, 200}}; !slices.Equal(g, want) {
		t.Errorf("ForTask(8) = %v, want %v", g, want)
	}
	if g := collect(9); g != nil {
		t.Errorf("ForTask(9) = %v, want nothing", g)
	}

	// A replay links 1 again: it is now the most recently used entry, and
	// an extension keeps its outputs in append order.
	l.Link(1, 13)
	l.Append(1, nil, []Output{out(7, 103)}, 1, t0.Add(4*time.Second))
	if g, want := collect(7), []got{{3, 300}, {1, 100}, {1, 102}, {1, 103}}; !slices.Equal(g, want) {
		t.Errorf("after Link: ForTask(7) = %v, want %v", g, want)
	}
	l.Complete(12, nil)
	if g, want := collect(7), []got{{1, 100}, {1, 102}, {1, 103}}; !slices.Equal(g, want) {
		t.Errorf("after Complete(12): ForTask(7) = %v, want %v", g, want)
	}
}

func TestFull(t *testing.T) {
	t.Run("entries", func(t *testing.T) {
		l := newLog(t, Config{MaxEntries: 2, MaxBytes: 1 << 20})
		l.Append(1, []uint64{10}, nil, 0, t0)
		if l.Full() {
			t.Fatal("Full() with 1 of 2 entries")
		}
		l.Append(1, []uint64{11}, []Output{out(7, 100)}, 1, t0) // extends, no new entry
		if l.Full() {
			t.Fatal("Full() after extending the only entry")
		}
		l.Append(2, []uint64{10}, nil, 0, t0)
		if !l.Full() {
			t.Fatal("not Full() with 2 of 2 entries")
		}
		l.Append(3, []uint64{12}, nil, 0, t0) // Append never refuses
		if !l.Has(3) || l.Len() != 3 || !l.Full() {
			t.Fatalf("Append past the bound: Has(3) = %v, Len() = %d, Full() = %v", l.Has(3), l.Len(), l.Full())
		}
		l.Complete(10, nil)
		if l.Full() {
			t.Fatalf("Full() with %d of 2 entries", l.Len())
		}
	})
	t.Run("bytes", func(t *testing.T) {
		l := newLog(t, Config{MaxEntries: 100, MaxBytes: 100})
		l.Append(1, []uint64{10}, []Output{out(7, 100)}, 60, t0)
		if l.Full() {
			t.Fatal("Full() at 60 of 100 bytes")
		}
		l.Append(2, []uint64{11}, []Output{out(7, 101)}, 39, t0)
		if l.Full() {
			t.Fatal("Full() at 99 of 100 bytes")
		}
		l.Append(2, nil, []Output{out(7, 102)}, 1, t0)
		if !l.Full() || l.Bytes() != 100 {
			t.Fatalf("Full() = %v at %d of 100 bytes, want true", l.Full(), l.Bytes())
		}
		l.Complete(11, nil)
		if l.Full() || l.Bytes() != 60 {
			t.Fatalf("Full() = %v at %d bytes, want false at 60", l.Full(), l.Bytes())
		}
	})
}

func TestBytesReturnToZero(t *testing.T) {
	l := newLog(t, DefaultConfig())
	r := rand.New(rand.NewPCG(11, 12))
	const trees = 50
	for in := range uint64(2000) {
		tree := r.Uint64N(trees)
		l.Append(in, []uint64{tree}, []Output{out(int32(in%5), in)}, int(r.IntN(500)), t0)
		switch r.IntN(4) {
		case 0:
			l.Link(in, r.Uint64N(trees))
		case 1:
			l.Append(in, []uint64{r.Uint64N(trees)}, []Output{out(1, in+1e6)}, int(r.IntN(100)), t0)
		}
	}
	if l.Bytes() == 0 || l.Len() != 2000 {
		t.Fatalf("before completing: Bytes() = %d, Len() = %d", l.Bytes(), l.Len())
	}
	removed := 0
	for tree := range uint64(trees) {
		removed += l.Complete(tree, nil)
		checkInvariants(t, l)
	}
	if removed != 2000 || l.Len() != 0 || l.Bytes() != 0 || len(l.trees) != 0 || l.oldest != nil || l.newest != nil {
		t.Fatalf("after completing every tree: removed %d, Len() = %d, Bytes() = %d, %d trees indexed, age list %p..%p",
			removed, l.Len(), l.Bytes(), len(l.trees), l.oldest, l.newest)
	}
}

// TestReusedEntriesStartClean removes entries (so their memory is reused)
// and checks that new entries carry nothing over: outputs, trees, sizes.
func TestReusedEntriesStartClean(t *testing.T) {
	l := newLog(t, DefaultConfig())
	for in := range uint64(10) {
		l.Append(in, []uint64{10, 11}, []Output{out(7, in), out(8, in)}, 10, t0)
	}
	l.Complete(10, nil)
	if len(l.free) != 10 {
		t.Fatalf("%d entries kept for reuse, want 10", len(l.free))
	}
	for _, e := range l.free {
		for _, o := range e.outs[:cap(e.outs)] {
			if o.Rec.Values != nil || o.Rec.Stream != "" {
				t.Fatalf("free entry keeps a record alive: %+v", o)
			}
		}
	}
	for in := range uint64(10) {
		l.Append(100+in, []uint64{12}, nil, 1, t0)
	}
	if len(l.free) != 0 {
		t.Fatalf("%d entries left unused, want 0", len(l.free))
	}
	for in := range uint64(10) {
		if got, ok := l.Outputs(100 + in); !ok || got != nil {
			t.Fatalf("Outputs(%d) = %v, %v; want no outputs", 100+in, got, ok)
		}
	}
	if n := l.Complete(11, nil); n != 0 {
		t.Fatalf("Complete(11) removed %d reused entries", n)
	}
	if n := l.Complete(12, nil); n != 10 || l.Bytes() != 0 {
		t.Fatalf("Complete(12) = %d, Bytes() = %d; want 10, 0", n, l.Bytes())
	}
	checkInvariants(t, l)
}

// model is the reference for TestProperty: plain maps, scanned in full.
type model struct {
	entries map[uint64]*modelEntry
	clock   int64
	seq     int // counts touches, to order entries by last touch
}

type modelEntry struct {
	trees   map[uint64]bool
	outs    []Output
	size    int64
	touched int64
	seq     int
}

func (m *model) touch(e *modelEntry) {
	e.touched = m.clock
	m.seq++
	e.seq = m.seq
}

// byAge lists the inputs oldest first, as the log's age list orders them.
func (m *model) byAge() []uint64 {
	ins := make([]uint64, 0, len(m.entries))
	for in := range m.entries {
		ins = append(ins, in)
	}
	slices.SortFunc(ins, func(a, b uint64) int { return m.entries[a].seq - m.entries[b].seq })
	return ins
}

func (m *model) bytes() int64 {
	var b int64
	for _, e := range m.entries {
		b += e.size
	}
	return b
}

func TestProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const (
		inputs = 64
		trees  = 24
		steps  = 20_000
	)
	l := newLog(t, Config{MaxEntries: 40, MaxBytes: 4000})
	m := &model{entries: map[uint64]*modelEntry{}, clock: t0.UnixNano()}
	id := uint64(0)
	var trimmed []uint64
	record := func(in uint64) { trimmed = append(trimmed, in) }

	for i := range steps {
		trimmed = trimmed[:0]
		var op string
		switch k := r.IntN(20); {
		case k < 10:
			in := r.Uint64N(inputs)
			ts := make([]uint64, r.IntN(3))
			for j := range ts {
				ts[j] = r.Uint64N(trees)
			}
			outs := make([]Output, r.IntN(4))
			for j := range outs {
				id++
				outs[j] = out(int32(r.IntN(3)), id)
			}
			size := r.IntN(200) - 10 // sometimes negative
			// Mostly forward, sometimes back: the log must clamp.
			now := time.Unix(0, m.clock+r.Int64N(int64(2*time.Second))-int64(500*time.Millisecond))
			op = fmt.Sprintf("Append(%d, %v, %d outs, %d)", in, ts, len(outs), size)
			l.Append(in, ts, outs, size, now)

			m.clock = max(m.clock, now.UnixNano())
			e := m.entries[in]
			if e == nil {
				e = &modelEntry{trees: map[uint64]bool{}}
				m.entries[in] = e
			}
			for _, o := range outs {
				o.Rec.Anchors = nil
				e.outs = append(e.outs, o)
			}
			e.size += int64(max(size, 0))
			for _, tr := range ts {
				e.trees[tr] = true
			}
			m.touch(e)
		case k < 13:
			in, tr := r.Uint64N(inputs), r.Uint64N(trees)
			op = fmt.Sprintf("Link(%d, %d)", in, tr)
			l.Link(in, tr)
			if e := m.entries[in]; e != nil {
				e.trees[tr] = true
				m.touch(e)
			}
		case k < 18:
			tr := r.Uint64N(trees)
			op = fmt.Sprintf("Complete(%d)", tr)
			n := l.Complete(tr, record)
			var want []uint64
			for in, e := range m.entries {
				if e.trees[tr] {
					want = append(want, in)
					delete(m.entries, in)
				}
			}
			slices.Sort(want)
			got := slices.Sorted(slices.Values(trimmed))
			if n != len(got) || !slices.Equal(got, want) {
				t.Fatalf("step %d: %s = %d trimming %v, want %v", i, op, n, got, want)
			}
		default:
			cutoff := m.clock - r.Int64N(int64(3*time.Second))
			op = fmt.Sprintf("Expire(clock-%v)", time.Duration(m.clock-cutoff))
			n := l.Expire(time.Unix(0, cutoff), func(in uint64, _ int) { record(in) })
			var want []uint64
			for _, in := range m.byAge() {
				if m.entries[in].touched < cutoff {
					want = append(want, in)
					delete(m.entries, in)
				}
			}
			if n != len(trimmed) || !slices.Equal(trimmed, want) {
				t.Fatalf("step %d: %s = %d trimming %v, want %v in that order", i, op, n, trimmed, want)
			}
		}

		if l.Len() != len(m.entries) || l.Bytes() != m.bytes() {
			t.Fatalf("step %d: after %s: Len() = %d, Bytes() = %d; model has %d, %d",
				i, op, l.Len(), l.Bytes(), len(m.entries), m.bytes())
		}
		if full := len(m.entries) >= 40 || m.bytes() >= 4000; l.Full() != full {
			t.Fatalf("step %d: after %s: Full() = %v, want %v", i, op, l.Full(), full)
		}
		for in := range uint64(inputs) {
			e := m.entries[in]
			if l.Has(in) != (e != nil) {
				t.Fatalf("step %d: after %s: Has(%d) = %v, want %v", i, op, in, l.Has(in), e != nil)
			}
			if i%50 != 0 {
				continue
			}
			got, ok := l.Outputs(in)
			var want []Output
			if e != nil {
				want = e.outs
			}
			if ok != (e != nil) || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
				t.Fatalf("step %d: after %s: Outputs(%d) = %v, %v; want %v", i, op, in, got, ok, want)
			}
		}
		if i%50 == 0 {
			checkInvariants(t, l)
			for dst := range int32(3) {
				var got, want []uint64
				l.ForTask(dst, func(in uint64, o Output) { got = append(got, in, o.Rec.ID) })
				for _, in := range m.byAge() {
					for _, o := range m.entries[in].outs {
						if o.Dst == dst {
							want = append(want, in, o.Rec.ID)
						}
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: after %s: ForTask(%d) = %v, want %v", i, op, dst, got, want)
				}
			}
		}
	}
}

// checkInvariants walks the log's internal structures: the age list holds
// every entry once, oldest first; every tree list links live entries that
// name the tree, each once; the entries' links are all in their lists; the
// byte count is the sum of the entries' sizes.
func checkInvariants(t *testing.T, l *Log) {
	t.Helper()
	seen := map[*entry]bool{}
	var bytes int64
	var prev *entry
	for e := l.oldest; e != nil; e = e.newer {
		if seen[e] || l.entries[e.input] != e || e.older != prev {
			t.Fatalf("age list broken at input %d", e.input)
		}
		if prev != nil && prev.touched > e.touched {
			t.Fatalf("age list out of order: %d (%d) before %d (%d)", prev.input, prev.touched, e.input, e.touched)
		}
		seen[e] = true
		bytes += e.size
		prev = e
	}
	if l.newest != prev || len(seen) != len(l.entries) {
		t.Fatalf("age list holds %d entries, map %d", len(seen), len(l.entries))
	}
	if bytes != l.bytes {
		t.Fatalf("entries sum to %d bytes, Bytes() = %d", bytes, l.bytes)
	}
	inLists := map[*link]bool{}
	for tree, head := range l.trees {
		if head == nil || head.prev != nil {
			t.Fatalf("tree %d: bad head", tree)
		}
		for k := head; k != nil; k = k.next {
			if k.tree != tree || k.e == nil || l.entries[k.e.input] != k.e || inLists[k] {
				t.Fatalf("tree %d: bad link to input %v", tree, k.e)
			}
			if k.next != nil && k.next.prev != k {
				t.Fatalf("tree %d: prev pointer broken", tree)
			}
			inLists[k] = true
		}
	}
	links := 0
	for _, e := range l.entries {
		if e.first.e == nil {
			if e.first.sib != nil {
				t.Fatalf("input %d: extra links without a first", e.input)
			}
			continue
		}
		names := map[uint64]bool{}
		for k := &e.first; k != nil; k = k.sib {
			if k.e != e || !inLists[k] || names[k.tree] {
				t.Fatalf("input %d: link to tree %d not indexed or repeated", e.input, k.tree)
			}
			names[k.tree] = true
			links++
		}
	}
	if links != len(inLists) {
		t.Fatalf("entries hold %d links, tree lists %d", links, len(inLists))
	}
}

// TestDiscardLeavesATombstone covers a bolt failing an input after a
// partial emit: the entry stops confirming duplicates, its outputs and
// earlier trees go, it stays linked to the failed attempt's tree until it
// completes (a dead-lettered root's), and a later Append (the replay's
// outputs) revives it.
func TestDiscardLeavesATombstone(t *testing.T) {
	l := newLog(t, DefaultConfig())
	l.Append(1, []uint64{10, 11}, []Output{out(7, 100), out(8, 101)}, 40, t0)
	l.Append(2, []uint64{10}, []Output{out(7, 102)}, 20, t0)
	l.Discard(1, []uint64{13}, t0)
	checkInvariants(t, l)
	if l.Has(1) || !l.Failed(1) || l.Len() != 1 || l.Tombstones() != 1 || l.Bytes() != 20 {
		t.Fatalf("after Discard: Has %v Failed %v Len %d Tombstones %d Bytes %d", l.Has(1), l.Failed(1), l.Len(), l.Tombstones(), l.Bytes())
	}
	if outs, ok := l.Outputs(1); ok || outs != nil {
		t.Fatalf("a tombstone shows outputs %v, %v", outs, ok)
	}
	// Completing a tree the input belonged to before it failed does not
	// remove the tombstone.
	var trimmed []uint64
	if n := l.Complete(10, func(in uint64) { trimmed = append(trimmed, in) }); n != 1 || !slices.Equal(trimmed, []uint64{2}) {
		t.Fatalf("Complete(10) removed %d: %v", n, trimmed)
	}
	if n := l.Complete(11, nil); n != 0 || !l.Failed(1) {
		t.Fatalf("Complete(11) removed %d; Failed(1) = %v", n, l.Failed(1))
	}
	// A discard of an input without an entry makes a tombstone too.
	l.Discard(3, nil, t0)
	if !l.Failed(3) || l.Tombstones() != 2 {
		t.Fatalf("Discard(3): Failed %v Tombstones %d", l.Failed(3), l.Tombstones())
	}
	// Completing the failed attempt's tree removes its tombstone, without
	// reporting the input as trimmed (done).
	l.Discard(4, []uint64{14, 15}, t0)
	checkInvariants(t, l)
	trimmed = trimmed[:0]
	if n := l.Complete(15, func(in uint64) { trimmed = append(trimmed, in) }); n != 1 || len(trimmed) != 0 || l.Failed(4) || l.Tombstones() != 2 {
		t.Fatalf("Complete(15) removed %d, reported %v; Failed(4) %v, Tombstones %d", n, trimmed, l.Failed(4), l.Tombstones())
	}
	checkInvariants(t, l)
	// The replay's outputs revive the entry, which leaves the failed tree.
	l.Append(1, []uint64{12}, []Output{out(7, 100)}, 10, t0.Add(time.Second))
	checkInvariants(t, l)
	if !l.Has(1) || l.Failed(1) || l.Tombstones() != 1 || l.Len() != 1 {
		t.Fatalf("after revival: Has %v Failed %v Tombstones %d Len %d", l.Has(1), l.Failed(1), l.Tombstones(), l.Len())
	}
	if n := l.Complete(13, nil); n != 0 || !l.Has(1) {
		t.Fatalf("Complete(13), the failed tree, removed %d of the revived entry", n)
	}
	if outs, _ := l.Outputs(1); !reflect.DeepEqual(outs, []Output{logged(7, 100)}) {
		t.Fatalf("revived entry holds %v", outs)
	}
	// Expiry removes tombstones without reporting them as trimmed.
	trimmed = trimmed[:0]
	if n := l.Expire(t0.Add(time.Millisecond), func(in uint64, _ int) { trimmed = append(trimmed, in) }); n != 1 || len(trimmed) != 0 {
		t.Fatalf("Expire removed %d, reported %v", n, trimmed)
	}
	if !l.Remove(1) || l.Remove(1) || l.Len() != 0 || l.Tombstones() != 0 || l.Bytes() != 0 {
		t.Fatalf("after Remove: Len %d Tombstones %d Bytes %d", l.Len(), l.Tombstones(), l.Bytes())
	}
	checkInvariants(t, l)
}
