package workers

import (
	"testing"
	"time"
)

// TestPendingWindowFollowsHowOftenItHolds: the window starts at an eighth
// of the bound, doubles after a period in which it held the spout back more
// than half the time, halves after one in which it held it less than a
// tenth, stays put in between, and never leaves its bounds.
func TestPendingWindowFollowsHowOftenItHolds(t *testing.T) {
	t0 := time.Now()
	w := newPendingWindow(4096, t0)
	if w.size != 512 || w.lo != 512 || w.hi != 4096 {
		t.Fatalf("new window %+v; want size 512 between 512 and 4096", w)
	}
	at := t0
	// period ends one period after the last with the spout held for the
	// given share of it.
	period := func(share float64) {
		held := time.Duration(share * float64(windowPeriod))
		w.held = held
		at = at.Add(windowPeriod)
		w.resize(at)
	}
	for i, want := range []int{1024, 2048, 4096, 4096} {
		period(0.8)
		if w.size != want {
			t.Fatalf("after %d periods held 80%% of the time: size %d, want %d", i+1, w.size, want)
		}
	}
	period(0.3)
	if w.size != 4096 {
		t.Fatalf("held 30%% of a period: size %d, want it unchanged at 4096", w.size)
	}
	for i, want := range []int{2048, 1024, 512, 512} {
		period(0.05)
		if w.size != want {
			t.Fatalf("after %d periods held 5%% of the time: size %d, want %d", i+1, w.size, want)
		}
	}
	// A period not over yet changes nothing.
	w.held = windowPeriod
	w.resize(at.Add(windowPeriod / 2))
	if w.size != 512 || w.held != windowPeriod {
		t.Fatalf("resized before its period ended: %+v", w)
	}
}

// TestPendingWindowCountsOnlyHeldTime: admits refuses at the window's size
// and counts the time until it admits again as held, unless the spout has
// nothing to emit; a period that ends while the spout is held counts the
// time up to its end and goes on counting into the next.
func TestPendingWindowCountsOnlyHeldTime(t *testing.T) {
	w := newPendingWindow(80, time.Now())
	if !w.admits(9, true) || w.admits(10, true) {
		t.Fatalf("a window of %d: admits 9 in flight and refuses 10, got otherwise", w.size)
	}
	if w.heldSince.IsZero() {
		t.Fatal("refusing a spout with records to emit did not start the held time")
	}
	time.Sleep(2 * time.Millisecond)
	if !w.admits(3, true) {
		t.Fatal("3 in flight refused")
	}
	if !w.heldSince.IsZero() || w.held < 2*time.Millisecond {
		t.Fatalf("after 2 ms held: heldSince %v, held %v", w.heldSince, w.held)
	}
	// A spout with nothing to emit is refused but not held back.
	w.held = 0
	if w.admits(10, false) || !w.heldSince.IsZero() {
		t.Fatal("a spout with nothing to emit counted as held")
	}
	// Held across the end of a period: the whole period counts, and the
	// rest of the hold goes into the next one.
	w.admits(10, true)
	w.heldSince = w.from
	w.resize(w.from.Add(windowPeriod))
	if w.size != 20 || w.heldSince != w.from || w.held != 0 {
		t.Fatalf("a period held throughout: %+v; want size 20, held since the new period's start", w)
	}
	// A bound of 1 (and any bound under 8) still admits one tree.
	one := newPendingWindow(1, time.Now())
	if one.size != 1 || !one.admits(0, true) || one.admits(1, true) {
		t.Fatalf("window of bound 1: %+v", one)
	}
}

// TestPendingWindowStartsFast: in slow start the window is resized every
// startPeriod, so a spout held from its first record has the whole bound
// after three short periods; slow start ends at the first period that
// did not hold the spout more than half the time, or at the bound, and
// then only whole periods resize it. A spout that is not held leaves slow
// start at once with the smallest window.
func TestPendingWindowStartsFast(t *testing.T) {
	t0 := time.Now()
	w := newPendingWindow(4096, t0)
	at := t0
	step := func(d time.Duration, share float64) {
		w.held += time.Duration(share * float64(d))
		at = at.Add(d)
		w.resize(at)
	}
	for i, want := range []int{1024, 2048, 4096} {
		step(startPeriod, 0.8)
		if w.size != want {
			t.Fatalf("after %d short periods held 80%% of the time: size %d, want %d", i+1, w.size, want)
		}
	}
	if w.starting {
		t.Fatal("still in slow start at the bound")
	}
	step(startPeriod, 0.05)
	if w.size != 4096 {
		t.Fatalf("after slow start a short period resized the window to %d", w.size)
	}

	w, at = newPendingWindow(4096, t0), t0
	step(startPeriod, 0.3)
	if w.size != 512 || w.starting {
		t.Fatalf("a spout held 30%% of its first short period: size %d, slow start %v; want 512 and over", w.size, w.starting)
	}
	step(startPeriod, 1)
	if w.size != 512 || w.held != startPeriod { // the period goes on
		t.Fatalf("after slow start a short period held throughout resized the window to %d", w.size)
	}
	step(windowPeriod-startPeriod, 1)
	if w.size != 512 {
		t.Fatalf("after slow start one whole period held throughout: size %d, want it to stay 512 (TestPendingWindowGrowsOnlyForASpoutHeldForLong)", w.size)
	}
}

// TestPendingWindowGrowsOnlyForASpoutHeldForLong: after slow start the
// window doubles for a spout held more than half of a period only once
// it has been held more than half the time over about heldHorizon: a
// spell of half a second held throughout leaves it as it was, one held
// 30% of the time does not double it either, and a spout held
// throughout from then on has it doubled within 0.4 s and then every
// period it is held.
func TestPendingWindowGrowsOnlyForASpoutHeldForLong(t *testing.T) {
	t0 := time.Now()
	w := newPendingWindow(4096, t0)
	at := t0
	period := func(share float64) {
		w.held = time.Duration(share * float64(windowPeriod))
		at = at.Add(windowPeriod)
		w.resize(at)
	}
	period(0) // ends slow start at 512
	if w.starting || w.size != 512 {
		t.Fatalf("after a period not held: %+v; want 512, slow start over", w)
	}
	for i := range 10 { // a spell of 0.5 s held throughout
		period(1)
		if w.size != 512 {
			t.Fatalf("%d periods (%v) into a spell held throughout: size %d, want 512", i+1, time.Duration(i+1)*windowPeriod, w.size)
		}
	}
	for range 40 { // the spell's held time decays
		period(0.3)
	}
	if w.size != 512 || w.heldAvg > 0.35 {
		t.Fatalf("after 2 s held 30%% of the time: size %d, held on average %.2f; want 512 and about 0.3", w.size, w.heldAvg)
	}
	var first time.Duration
	for i := 1; i <= 20; i++ {
		period(1)
		if w.size > 512 {
			first = time.Duration(i) * windowPeriod
			break
		}
	}
	// From a held average of about 0.3, that of a spout held throughout
	// passes 0.5 after seven periods (1 - 0.7 x 0.95^n > 0.5).
	if first < 300*time.Millisecond || first > 400*time.Millisecond {
		t.Fatalf("a spout held throughout had the window doubled after %v; want 0.3-0.4 s", first)
	}
	for i, want := range []int{2048, 4096, 4096} {
		period(0.8)
		if w.size != want {
			t.Fatalf("%d periods after the first doubling, held 80%%: size %d, want %d", i+1, w.size, want)
		}
	}
}

// TestPendingWindowKeepsDoublingAfterAnEarlySlowStartEnd: a saturated
// spout whose slow start ended at a period held less than half the time
// (spent emitting, say) still has its window doubled within three
// periods held, where a paced spout, not held in its first period, would
// wait about 0.7 s.
func TestPendingWindowKeepsDoublingAfterAnEarlySlowStartEnd(t *testing.T) {
	t0 := time.Now()
	w := newPendingWindow(4096, t0)
	at := t0
	step := func(d time.Duration, share float64) {
		w.held = time.Duration(share * float64(d))
		at = at.Add(d)
		w.resize(at)
	}
	step(startPeriod, 0.9)
	step(startPeriod, 0.9)
	step(startPeriod, 0.4) // ends slow start at 2048
	if w.starting || w.size != 2048 {
		t.Fatalf("after slow start periods held 90%%, 90%% and 40%%: %+v; want 2048, slow start over", w)
	}
	n := 0
	for w.size == 2048 && n < 20 {
		step(windowPeriod, 0.9)
		n++
	}
	if w.size != 4096 || n > 3 {
		t.Fatalf("held 90%% after slow start: size %d after %d periods; want 4096 within 3", w.size, n)
	}
}
