package acker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/wire"
)

func initMsg(tree, val uint64, spout int32) wire.AckMsg {
	return wire.AckMsg{Type: wire.AckInit, Tree: tree, Val: val, Task: spout}
}

func ackMsg(tree, val uint64, task int32) wire.AckMsg {
	return wire.AckMsg{Type: wire.AckAck, Tree: tree, Val: val, Task: task}
}

func failMsg(tree uint64) wire.AckMsg  { return wire.AckMsg{Type: wire.AckFail, Tree: tree, Task: -1} }
func resetMsg(tree uint64) wire.AckMsg { return wire.AckMsg{Type: wire.AckReset, Tree: tree, Task: -1} }

func complete(tree uint64, spout int32, holders uint64) Verdict {
	return Verdict{Type: wire.NoticeComplete, Tree: tree, SpoutTask: spout, Holders: holders}
}

// failed is the verdict of a FAIL sent by failMsg (no task, no reason).
func failed(tree uint64, spout int32, holders uint64) Verdict {
	return Verdict{Type: wire.NoticeFailed, Tree: tree, SpoutTask: spout, Holders: holders, Failer: -1}
}

// expired is the verdict of a tree that timed out in the acker.
func expired(tree uint64, spout int32, holders uint64) Verdict {
	return Verdict{Type: wire.NoticeFailed, Tree: tree, SpoutTask: spout, Holders: holders, Failer: NoTask, Err: ErrTimedOut}
}

func bit(task int) uint64 { return 1 << (task % 64) }

// step is one message, or a Tick when tick is set, and the verdicts it must
// produce (in any order).
type step struct {
	msg  wire.AckMsg
	tick bool
	want []Verdict
}

func tick(want ...Verdict) step { return step{tick: true, want: want} }

func msg(m wire.AckMsg, want ...Verdict) step { return step{msg: m, want: want} }

// reset is the verdict a RESET of an INITed tree yields for its spout.
func reset(tree uint64, spout int32) Verdict {
	return Verdict{Type: wire.NoticeReset, Tree: tree, SpoutTask: spout}
}

func sortVerdicts(vs []Verdict) {
	slices.SortFunc(vs, func(a, b Verdict) int {
		if a.Tree != b.Tree {
			if a.Tree < b.Tree {
				return -1
			}
			return 1
		}
		return int(a.Type) - int(b.Type)
	})
}

func newTracker(t *testing.T, buckets int) *Tracker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Buckets = buckets
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return tr
}

func TestHandle(t *testing.T) {
	const a, b, c = 0xa1a1, 0xb2b2, 0xc3c3
	tests := []struct {
		name        string
		buckets     int // 0 means 3
		steps       []step
		wantPending int
	}{
		{
			name: "init then acks complete the tree",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a^b, 3)),
				msg(ackMsg(1, b, 4), complete(1, 7, bit(3)|bit(4))),
			},
		},
		{
			name: "init with value 0 completes at once",
			steps: []step{
				msg(initMsg(1, 0, 7), complete(1, 7, 0)),
			},
		},
		{
			name: "ack with task -1 registers no holder",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a, -1), complete(1, 7, 0)),
			},
		},
		{
			name: "holders are task mod 64",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a^b, 65)),
				msg(ackMsg(1, b^c, 63)),
				msg(ackMsg(1, c, 0), complete(1, 7, 1<<1|1<<63|1<<0)),
			},
		},
		{
			name: "acks before init keep the value and wait for the init",
			steps: []step{
				msg(ackMsg(1, a^b, 2)),
				msg(ackMsg(1, b^a, 5)), // value is 0 now, but no INIT yet
				msg(initMsg(1, 0, 9), complete(1, 9, bit(2)|bit(5))),
			},
		},
		{
			name: "acks that cancel out before the init leave nothing to hold",
			steps: []step{
				msg(ackMsg(1, a, -1)),
				msg(ackMsg(1, a, -1)),
			},
		},
		{
			name: "an ack with value 0 for an unknown tree holds nothing",
			steps: []step{
				msg(ackMsg(1, 0, -1)),
			},
		},
		{
			name: "init last completes",
			steps: []step{
				msg(ackMsg(1, a^b, 2)),
				msg(ackMsg(1, b, 4)),
				msg(initMsg(1, a, 9), complete(1, 9, bit(2)|bit(4))),
			},
		},
		{
			name: "trees are independent",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(initMsg(2, a, 8)),
				msg(ackMsg(2, a, 1), complete(2, 8, bit(1))),
			},
			wantPending: 1,
		},
		{
			name: "fail after init",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a^b, 2)),
				msg(failMsg(1), failed(1, 7, bit(2))),
			},
		},
		{
			name: "fail before init tells holders now and the spout at init",
			steps: []step{
				msg(ackMsg(1, a^b, 2)),
				msg(failMsg(1), failed(1, NoSpout, bit(2))),
				msg(ackMsg(1, b, 3)),
				msg(initMsg(1, a, 9), failed(1, 9, bit(3))),
			},
		},
		{
			name: "fail of an unknown tree",
			steps: []step{
				msg(failMsg(1), failed(1, NoSpout, 0)),
				msg(initMsg(1, a, 9), failed(1, 9, 0)),
			},
		},
		{
			name: "an ack after the tree completed opens an entry that expires silently",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a, 2), complete(1, 7, bit(2))),
				msg(ackMsg(1, b, 2)),
				tick(), tick(), tick(),
			},
		},
		{
			name: "an ack after the tree failed opens an entry that expires silently",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(failMsg(1), failed(1, 7, 0)),
				msg(ackMsg(1, a, 2)),
				tick(), tick(), tick(),
			},
		},
		{
			name: "expiry after Timeout",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(ackMsg(1, a^b, 2)),
				tick(), tick(),
				tick(expired(1, 7, bit(2))),
			},
		},
		{
			name: "a tree never INITed expires silently",
			steps: []step{
				msg(ackMsg(1, a, 2)),
				tick(), tick(), tick(),
			},
		},
		{
			name: "a tree failed before its INIT expires silently",
			steps: []step{
				msg(failMsg(1), failed(1, NoSpout, 0)),
				tick(), tick(), tick(),
			},
		},
		{
			name: "an ack does not move the tree: timeout counts from the first message",
			steps: []step{
				msg(initMsg(1, a, 7)),
				tick(),
				msg(ackMsg(1, a^b, 2)),
				tick(),
				msg(ackMsg(1, b^c, 3)),
				tick(expired(1, 7, bit(2)|bit(3))),
			},
		},
		{
			name: "the timeout counts from an early ack, not from the init",
			steps: []step{
				msg(ackMsg(1, a^b, 2)),
				tick(),
				msg(initMsg(1, a, 7)),
				tick(),
				tick(expired(1, 7, bit(2))),
			},
		},
		{
			name: "reset moves the tree to the newest bucket",
			steps: []step{
				msg(initMsg(1, a, 7)),
				tick(), tick(),
				msg(resetMsg(1), reset(1, 7)),
				tick(), tick(),
				tick(expired(1, 7, 0)),
			},
		},
		{
			name: "reset from a middle bucket",
			steps: []step{
				msg(initMsg(1, a, 7)),
				tick(),
				msg(resetMsg(1), reset(1, 7)),
				tick(), tick(), // without the RESET the second would expire it
				tick(expired(1, 7, 0)),
			},
		},
		{
			name: "reset in the newest bucket changes nothing",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(resetMsg(1), reset(1, 7)),
				tick(), tick(),
				tick(expired(1, 7, 0)),
			},
		},
		{
			name: "reset of an unknown tree holds nothing",
			steps: []step{
				msg(resetMsg(1)),
			},
		},
		{
			name: "a reset tree still completes",
			steps: []step{
				msg(initMsg(1, a, 7)),
				tick(),
				msg(resetMsg(1), reset(1, 7)),
				msg(ackMsg(1, a, 4), complete(1, 7, bit(4))),
			},
		},
		{
			name:    "two buckets expire on the second tick",
			buckets: 2,
			steps: []step{
				msg(initMsg(1, a, 7)),
				tick(),
				tick(expired(1, 7, 0)),
			},
		},
		{
			name: "several trees expire in one tick",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(initMsg(2, b, 8)),
				msg(ackMsg(3, c, 1)),
				tick(), tick(),
				tick(expired(1, 7, 0), expired(2, 8, 0)),
			},
		},
		{
			name: "spout tasks beyond the inline range are reported exactly",
			steps: []step{
				msg(initMsg(1, a, 70000)),
				msg(initMsg(2, a, -5)),
				msg(initMsg(3, a, maxInlineSpout)),
				msg(initMsg(4, a, maxInlineSpout+1)),
				msg(initMsg(5, a, 1<<31-1)),
				msg(ackMsg(1, a, 1), complete(1, 70000, bit(1))),
				msg(failMsg(2), failed(2, -5, 0)),
				msg(ackMsg(3, a, 1), complete(3, maxInlineSpout, bit(1))),
				tick(), tick(),
				tick(expired(4, maxInlineSpout+1, 0), expired(5, 1<<31-1, 0)),
			},
		},
		{
			name: "a second init keeps the first spout",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(initMsg(1, b, 8)),
				msg(ackMsg(1, a^b, 1), complete(1, 7, bit(1))),
			},
		},
		{
			name: "unknown message types are ignored",
			steps: []step{
				msg(initMsg(1, a, 7)),
				msg(wire.AckMsg{Type: 99, Tree: 1, Val: a, Task: 1}),
				msg(wire.AckMsg{Type: 0, Tree: 2, Val: a, Task: 1}),
			},
			wantPending: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buckets := tt.buckets
			if buckets == 0 {
				buckets = 3
			}
			tr := newTracker(t, buckets)
			for i, s := range tt.steps {
				var got []Verdict
				if s.tick {
					got = tr.Tick(nil)
				} else {
					got = tr.Handle(s.msg, nil)
				}
				sortVerdicts(got)
				sortVerdicts(s.want)
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d (%+v): got verdicts %+v, want %+v", i, s, got, s.want)
				}
			}
			if got := tr.Pending(); got != tt.wantPending {
				t.Errorf("Pending() = %d, want %d", got, tt.wantPending)
			}
			if tt.wantPending == 0 && len(tr.bigSpouts) != 0 {
				t.Errorf("bigSpouts holds %d entries after every tree was forgotten", len(tr.bigSpouts))
			}
		})
	}
}

func TestHandleAppendsToOut(t *testing.T) {
	tr := newTracker(t, 3)
	out := []Verdict{failed(99, 1, 0)}
	tr.Handle(initMsg(1, 5, 7), nil)
	out = tr.Handle(ackMsg(1, 5, 2), out)
	want := []Verdict{failed(99, 1, 0), complete(1, 7, bit(2))}
	if !slices.Equal(out, want) {
		t.Fatalf("got %+v, want %+v", out, want)
	}
}

// TestExpiryWindow checks that a tree put into the newest bucket just after
// a tick survives Buckets-1 ticks (at least Timeout) and expires at the next
// one (at most Timeout*Buckets/(Buckets-1)).
func TestExpiryWindow(t *testing.T) {
	for buckets := 2; buckets <= 6; buckets++ {
		t.Run(fmt.Sprint(buckets), func(t *testing.T) {
			tr := newTracker(t, buckets)
			tr.Handle(initMsg(1, 5, 7), nil)
			for i := 1; i < buckets; i++ {
				if got := tr.Tick(nil); len(got) != 0 {
					t.Fatalf("tick %d: tree expired early: %+v", i, got)
				}
			}
			got := tr.Tick(nil)
			if want := []Verdict{expired(1, 7, 0)}; !slices.Equal(got, want) {
				t.Fatalf("tick %d: got %+v, want %+v", buckets, got, want)
			}
			if tr.Pending() != 0 {
				t.Fatalf("Pending() = %d after expiry, want 0", tr.Pending())
			}
		})
	}
}

func TestConfig(t *testing.T) {
	if d := DefaultConfig(); d.Timeout != 30*time.Second || d.Buckets != 3 {
		t.Errorf("DefaultConfig() = %+v, want 30s and 3 buckets", d)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty means valid
		every   time.Duration
	}{
		{name: "default", cfg: DefaultConfig(), every: 15 * time.Second},
		{name: "two buckets", cfg: Config{Timeout: time.Second, Buckets: 2}, every: time.Second},
		{name: "ten buckets", cfg: Config{Timeout: 9 * time.Second, Buckets: 10}, every: time.Second},
		{name: "zero value", cfg: Config{}, wantErr: "Timeout must be positive"},
		{name: "negative timeout", cfg: Config{Timeout: -time.Second, Buckets: 3}, wantErr: "Timeout must be positive"},
		{name: "one bucket", cfg: Config{Timeout: time.Second, Buckets: 1}, wantErr: "Buckets must be at least 2"},
		{name: "no buckets", cfg: Config{Timeout: time.Second, Buckets: 0}, wantErr: "Buckets must be at least 2"},
		{name: "timeout too short", cfg: Config{Timeout: time.Nanosecond, Buckets: 3}, wantErr: "too short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			tr, newErr := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New() error = %v; want both nil", err, newErr)
				}
				if got := tr.RotateEvery(); got != tt.every {
					t.Errorf("RotateEvery() = %v, want %v", got, tt.every)
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
				if !strings.HasPrefix(e.Error(), "acker: ") || !strings.Contains(e.Error(), tt.wantErr) {
					t.Errorf("error %q: want prefix %q and %q in it", e, "acker: ", tt.wantErr)
				}
			}
			if tr != nil {
				t.Errorf("New returned a Tracker with an error")
			}
		})
	}
}

// genTree produces the acker messages that Storm's algorithm sends for one
// random tree: the spout's INIT first, then one ACK per record delivered,
// in the order they were generated (callers shuffle them). Each record is a
// copy delivered on one or more edges; processing it emits 0..maxChildren
// children, each sent to 1..2 tasks on fresh edges. Sometimes a child is
// also anchored to a second record of the same tree that is still waiting to
// be processed, as a join does: each copy of the child then gets one edge
// per anchor, and each anchor XORs its edge into its own ack value, exactly
// as Storm's BoltOutputCollector does.
func genTree(r *rand.Rand, tree uint64) (msgs []wire.AckMsg, spout int32, holders uint64) {
	type record struct {
		in     uint64 // XOR of the edges by which this copy belongs to the tree
		ackVal uint64 // XOR of the edges this copy created for its children
		depth  int
	}
	const maxDepth, maxChildren = 4, 3
	spout = int32(r.IntN(100))
	var queue []*record
	var initVal uint64
	for range 1 + r.IntN(3) {
		e := r.Uint64()
		initVal ^= e
		queue = append(queue, &record{in: e})
	}
	msgs = append(msgs, initMsg(tree, initVal, spout))
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		if x.depth < maxDepth {
			for range r.IntN(maxChildren + 1) {
				var other *record
				if len(queue) > 0 && r.IntN(4) == 0 {
					other = queue[r.IntN(len(queue))]
				}
				for range 1 + r.IntN(2) {
					child := &record{depth: x.depth + 1}
					e := r.Uint64()
					x.ackVal ^= e
					child.in ^= e
					if other != nil {
						e2 := r.Uint64()
						other.ackVal ^= e2
						child.in ^= e2
					}
					queue = append(queue, child)
				}
			}
		}
		task := int32(r.IntN(200)) - 50 // some -1..-50: no log entries
		if task < 0 {
			task = -1
		} else {
			holders |= 1 << (task % 64)
		}
		msgs = append(msgs, ackMsg(tree, x.in^x.ackVal, task))
	}
	return msgs, spout, holders
}

func shuffle(r *rand.Rand, msgs []wire.AckMsg) {
	r.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
}

func TestPropertyTreeCompletesExactlyAfterLastMessage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tr := newTracker(t, 3)
	sizes := 0
	for n := range 3000 {
		tree := r.Uint64()
		msgs, spout, holders := genTree(r, tree)
		sizes += len(msgs)
		shuffle(r, msgs)
		for i, m := range msgs {
			got := tr.Handle(m, nil)
			if i < len(msgs)-1 {
				if len(got) != 0 {
					t.Fatalf("tree %d: message %d of %d produced %+v before the last message", n, i, len(msgs), got)
				}
				continue
			}
			if want := []Verdict{complete(tree, spout, holders)}; !slices.Equal(got, want) {
				t.Fatalf("tree %d: last message produced %+v, want %+v", n, got, want)
			}
		}
		if tr.Pending() != 0 {
			t.Fatalf("tree %d: Pending() = %d after completion, want 0", n, tr.Pending())
		}
	}
	t.Logf("%d messages in 3000 trees", sizes)
}

// TestPropertyDroppedAckNeverCompletes drops each ACK of each tree in turn:
// the rest, in any order, must never complete the tree, and the tree must
// expire as failed, naming the holders of the ACKs that did arrive.
func TestPropertyDroppedAckNeverCompletes(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tr := newTracker(t, 3)
	runs := 0
	for n := range 200 {
		tree := r.Uint64()
		msgs, spout, _ := genTree(r, tree)
		for drop := 1; drop < len(msgs); drop++ { // msgs[0] is the INIT
			rest := slices.Delete(slices.Clone(msgs), drop, drop+1)
			shuffle(r, rest)
			var holders uint64
			for i, m := range rest {
				if m.Type == wire.AckAck && m.Task >= 0 {
					holders |= bit(int(m.Task))
				}
				if got := tr.Handle(m, nil); len(got) != 0 {
					t.Fatalf("tree %d without ACK %+v: message %d produced %+v", n, msgs[drop], i, got)
				}
			}
			if tr.Pending() != 1 {
				t.Fatalf("tree %d: Pending() = %d, want 1", n, tr.Pending())
			}
			tr.Tick(nil)
			tr.Tick(nil)
			if got, want := tr.Tick(nil), []Verdict{expired(tree, spout, holders)}; !slices.Equal(got, want) {
				t.Fatalf("tree %d without ACK %+v: expiry produced %+v, want %+v", n, msgs[drop], got, want)
			}
			runs++
		}
	}
	t.Logf("%d trees each missing one ACK", runs)
}

func TestPropertyDroppedInitExpiresSilently(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tr := newTracker(t, 3)
	for n := range 500 {
		msgs, _, _ := genTree(r, r.Uint64())
		msgs = msgs[1:]
		shuffle(r, msgs)
		for i, m := range msgs {
			if got := tr.Handle(m, nil); len(got) != 0 {
				t.Fatalf("tree %d without INIT: message %d produced %+v", n, i, got)
			}
		}
	}
	if tr.Pending() != 500 {
		t.Fatalf("Pending() = %d, want 500", tr.Pending())
	}
	for i := range 3 {
		if got := tr.Tick(nil); len(got) != 0 {
			t.Fatalf("tick %d: trees never INITed produced %+v", i, got)
		}
	}
	if tr.Pending() != 0 {
		t.Fatalf("Pending() = %d after expiry, want 0", tr.Pending())
	}
}

func TestPropertyInterleavedTrees(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for round := range 20 {
		const trees = 500
		type want struct {
			spout   int32
			holders uint64
			left    int // messages not yet applied
		}
		wants := make(map[uint64]*want, trees)
		var all []wire.AckMsg
		for range trees {
			tree := r.Uint64()
			msgs, spout, holders := genTree(r, tree)
			wants[tree] = &want{spout: spout, holders: holders, left: len(msgs)}
			all = append(all, msgs...)
		}
		shuffle(r, all)
		tr := newTracker(t, 3)
		var out []Verdict
		done := 0
		for i, m := range all {
			w := wants[m.Tree]
			w.left--
			out = tr.Handle(m, out[:0])
			if w.left > 0 {
				if len(out) != 0 {
					t.Fatalf("round %d, message %d: tree %x produced %+v with %d messages left", round, i, m.Tree, out, w.left)
				}
				continue
			}
			if want := []Verdict{complete(m.Tree, w.spout, w.holders)}; !slices.Equal(out, want) {
				t.Fatalf("round %d, message %d: tree %x produced %+v, want %+v", round, i, m.Tree, out, want)
			}
			done++
			if got, want := tr.Pending(), trees-done; got > want {
				t.Fatalf("round %d: Pending() = %d with %d trees incomplete", round, got, want)
			}
		}
		if done != trees || tr.Pending() != 0 {
			t.Fatalf("round %d: %d of %d trees completed, Pending() = %d", round, done, trees, tr.Pending())
		}
	}
}

// TestPropertyInterleavedTreesAcrossTicks spreads the messages of many trees
// over several ticks, fewer than expire a tree, so that lookups hit every
// bucket; every tree must still complete exactly once.
func TestPropertyInterleavedTreesAcrossTicks(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const trees = 2000
	tr := newTracker(t, 4)
	left := make(map[uint64]int, trees)
	var all []wire.AckMsg
	for range trees {
		tree := r.Uint64()
		msgs, _, _ := genTree(r, tree)
		left[tree] = len(msgs)
		all = append(all, msgs...)
	}
	shuffle(r, all)
	completed := make(map[uint64]int, trees)
	var out []Verdict
	for i, m := range all {
		if i > 0 && i%(len(all)/3+1) == 0 {
			if got := tr.Tick(nil); len(got) != 0 {
				t.Fatalf("message %d: tick expired %d trees before their timeout", i, len(got))
			}
		}
		if r.IntN(10) == 0 {
			out = tr.Handle(resetMsg(m.Tree), out[:0])
			for _, v := range out {
				if v.Type != wire.NoticeReset || v.Tree != m.Tree {
					t.Fatalf("RESET produced %+v", out)
				}
			}
		}
		left[m.Tree]--
		out = tr.Handle(m, out[:0])
		for _, v := range out {
			completed[v.Tree]++
			if v.Type != wire.NoticeComplete || left[v.Tree] != 0 {
				t.Fatalf("message %d: verdict %+v with %d messages left", i, v, left[v.Tree])
			}
		}
	}
	for tree := range left {
		if completed[tree] != 1 {
			t.Fatalf("tree %x completed %d times, want 1", tree, completed[tree])
		}
	}
	if tr.Pending() != 0 {
		t.Fatalf("Pending() = %d, want 0", tr.Pending())
	}
}

// TestFailCarriesWhoAndWhy checks that the failing task and its reason reach
// the spout's verdict, also when the FAIL overtook the INIT, and that a
// remembered reason is dropped with the tree.
func TestFailCarriesWhoAndWhy(t *testing.T) {
	tr := newTracker(t, 3)
	fail := wire.AckMsg{Type: wire.AckFail, Tree: 1, Task: 4, Err: "count: boom"}
	tr.Handle(initMsg(1, 5, 7), nil)
	want := Verdict{Type: wire.NoticeFailed, Tree: 1, SpoutTask: 7, Failer: 4, Err: "count: boom"}
	if got := tr.Handle(fail, nil); !slices.Equal(got, []Verdict{want}) {
		t.Fatalf("FAIL after INIT: got %+v, want %+v", got, want)
	}
	fail.Tree = 2
	early := Verdict{Type: wire.NoticeFailed, Tree: 2, SpoutTask: NoSpout, Failer: 4, Err: "count: boom"}
	if got := tr.Handle(fail, nil); !slices.Equal(got, []Verdict{early}) {
		t.Fatalf("FAIL before INIT: got %+v, want %+v", got, early)
	}
	want.Tree = 2
	if got := tr.Handle(initMsg(2, 5, 7), nil); !slices.Equal(got, []Verdict{want}) {
		t.Fatalf("INIT after FAIL: got %+v, want %+v", got, want)
	}
	fail.Tree = 3
	tr.Handle(fail, nil)
	for i := 0; i < 3; i++ {
		tr.Tick(nil)
	}
	if len(tr.early) != 0 {
		t.Fatalf("reasons of expired trees are kept: %v", tr.early)
	}
}
