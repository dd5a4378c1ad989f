package workers

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
)

// TestRootMarksWriteTheOldestPositionNotDone drives rootMarks through
// roots done out of order, a root that is never done, and more marks than
// maxMarks: the frontier is always the position of the oldest mark with a
// root not done, and never passes a root that is not.
func TestRootMarksWriteTheOldestPositionNotDone(t *testing.T) {
	var m rootMarks
	pos := func(n int) []byte { return []byte(strconv.Itoa(n)) }
	m.start(pos(0), 0, time.Now())
	mark := func(n int) { m.marks = append(m.marks, rootMark{pos: pos(n)}) }
	want := func(n int) {
		t.Helper()
		if got := string(m.frontier()); got != strconv.Itoa(n) {
			t.Fatalf("frontier at %s, want %d", got, n)
		}
	}
	roots := make([]pendingRoot, 10)
	// Roots 0-2 before the mark at 3, 3-5 before the one at 6, 6-9 after.
	for i := range roots {
		if i == 3 || i == 6 {
			mark(i)
		}
		m.add(&roots[i])
	}
	want(0)
	m.done(&roots[4]) // a later mark's root: the oldest still counts three
	m.done(&roots[1])
	m.done(&roots[0])
	want(0)
	m.done(&roots[2])
	want(3) // roots 0-2 done; 3 and 5 are not
	m.done(&roots[3])
	m.done(&roots[5])
	want(6)
	for i := 6; i < 10; i++ {
		m.done(&roots[i])
	}
	want(6) // the newest mark stays, whatever it counts
	mark(10)
	want(10)
	m.done(&roots[9]) // done twice: counted out once
	if m.marks[0].pending != 0 {
		t.Fatalf("newest mark counts %d", m.marks[0].pending)
	}

	// A root never done holds the frontier, however many marks follow;
	// the marks stop at maxMarks (advance takes no more), and the newest
	// then takes every root.
	var stuck pendingRoot
	m.add(&stuck)
	var later pendingRoot
	for n := 11; len(m.marks) < maxMarks; n++ {
		mark(n)
		m.add(&later)
		m.done(&later)
	}
	want(10)
	m.done(&stuck)
	want(maxMarks + 9) // the newest mark
}

// TestRootMarksComeSoonAfterAStart: a task's first marks come sooner than
// frontierEvery, so that one restarted every few hundred milliseconds
// still moves its frontier past the start (a root's mark is written only
// once a later mark exists); then every frontierEvery, and a start begins
// the ramp again.
func TestRootMarksComeSoonAfterAStart(t *testing.T) {
	var m rootMarks
	for range 2 {
		m.start(nil, 0, time.Now())
		var at time.Duration
		for i := range 20 {
			d := m.due()
			if d <= 0 || d > frontierEvery {
				t.Fatalf("mark %d due %v after the last", i, d)
			}
			if i >= 8 && d != frontierEvery {
				t.Fatalf("mark %d due %v after the last, want frontierEvery", i, d)
			}
			at += d
			m.taken++
			if i == 1 && at > frontierEvery/4 {
				t.Fatalf("the second mark comes %v after the start", at)
			}
		}
	}
}

// flakyPositions is a Positions whose writes fail while down, as they do
// while a worker is cut off from NATS.
type flakyPositions struct {
	cluster.Positions
	down bool
}

func (f *flakyPositions) Put(ctx context.Context, p cluster.SpoutPosition, rev uint64) (uint64, error) {
	if f.down {
		return 0, errors.New("nats: timeout")
	}
	return f.Positions.Put(ctx, p, rev)
}

// countingSource stands at the number of records read.
type countingSource struct{ n int }

func (c *countingSource) Position() ([]byte, error) { return []byte(strconv.Itoa(c.n)), nil }

func (c *countingSource) Seek(b []byte) (err error) {
	c.n, err = strconv.Atoi(string(b))
	return err
}

// TestAtLeastOnceMarksStopAtAnotherOwnersWrite drives an at-least-once
// spout's position keeper through a write that fails (it keeps reading,
// and the next mark writes the frontier it missed) and a write that
// finds another owner's: its task runs elsewhere now, so it stops reading
// and never writes over the new owner's position.
func TestAtLeastOnceMarksStopAtAnotherOwnersWrite(t *testing.T) {
	var logs bytes.Buffer
	lg := zerolog.New(&logs)
	store := &flakyPositions{Positions: cluster.NewMemoryPositions()}
	src := &countingSource{}
	s := &spoutExec{base: base{
		task: &task{info: &taskInfo{id: 3, name: "numbers"}},
		r:    &run{warn: lg, aborted: make(chan struct{})},
		out:  &outbox{},
		tc:   topology.TaskContext{Logger: lg},
	}}
	key := cluster.SpoutPosition{Topology: "t", Task: 3, Submitted: time.Unix(1, 0).UTC()}
	p := &spoutPositions{s: s, store: store, src: src, key: key, marks: &rootMarks{}}
	ctx := context.Background()
	if err := p.start(ctx); err != nil {
		t.Fatal(err)
	}
	written := func(want string) {
		t.Helper()
		got, _, err := store.Get(ctx, "t", 3)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Position) != want {
			t.Fatalf("position %q written, want %q", got.Position, want)
		}
	}
	now := time.Now()
	tick := func() {
		now = now.Add(frontierEvery)
		p.advance(now)
	}
	// roots reads k records and has them all done after the next mark.
	roots := func(k int) {
		rs := make([]pendingRoot, k)
		for i := range rs {
			src.n++
			s.emitted++
			p.marks.add(&rs[i])
		}
		tick()
		for i := range rs {
			p.marks.done(&rs[i])
		}
		tick()
	}
	written("0")
	roots(5)
	written("5")

	store.down = true
	roots(5)
	written("5")
	if !p.failing || p.stale || p.blocks() {
		t.Fatalf("after a failed write: failing %v, stale %v, blocks %v; want it failing and reading on", p.failing, p.stale, p.blocks())
	}
	store.down = false
	tick()
	written("10")
	if p.failing {
		t.Fatal("still failing after a write that worked")
	}

	// Another owner started the task and claimed its key.
	_, rev, err := store.Get(ctx, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	other := key
	other.Position = []byte("7")
	if _, err := store.Put(ctx, other, rev); err != nil {
		t.Fatal(err)
	}
	roots(5)
	if !p.stale || !p.blocks() {
		t.Fatalf("after another owner's write: stale %v, blocks %v; want it to stop reading", p.stale, p.blocks())
	}
	roots(5)
	written("7")
	for _, want := range []string{"cannot write the at-least-once spout's position", "the spout's position is written again", "another worker runs this at-least-once spout task now"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line says %q:\n%s", want, logs.String())
		}
	}
}
