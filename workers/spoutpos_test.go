package workers

import (
	"strconv"
	"testing"
	"time"
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
