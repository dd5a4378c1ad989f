package workers

import "time"

// pendingWindow is how many trees a spout task lets be in flight: between
// an eighth of Config.MaxSpoutPending and all of it, sized by whether the
// window holds the spout back.
//
// A fixed bound of MaxSpoutPending (Storm's max.spout.pending) keeps the
// topology's queues as deep as that bound whenever it stalls: at half of
// word count's peak a stall of a few milliseconds (a collection, the host
// taking a core away) let the spout put up to 4,096 lines into the
// stalled pipeline, and every tree behind them waited for them, 10-20 ms
// at p99 where trees took 1 ms at p50. A bound of 512 kept p99 near 5 ms
// at the same offered load, and cost nothing at the peak of word count
// on two workers; but a fixed small bound throttles a topology whose
// trees take long (a slow host spell, a real network between workers):
// in one paced run of five its spout fell behind the input's schedule
// and never caught up (docs/performance.md, round seventeen).
//
// So the window starts small and doubles while the spout spends more than
// half of a period held back by it with records to emit, which a
// saturated spout is all the time, and halves back while it is held less
// than a tenth of a period. A spout below its topology's capacity keeps a
// shallow window, and the records a stall leaves unread wait in the
// source, where the broker or the file keeps them, instead of in the
// topology's queues; a spout at capacity gets the whole bound within a few
// periods. This is TCP's congestion window in miniature, with "held back"
// as its signal in place of a lost packet.
//
// Being held for one period is not enough reason to grow, though: a
// spout is held just as much while the topology behind it is slow for a
// while (a cold start, a collection, the host taking a core away), and
// then more trees in flight only wait longer. In the first run of a
// fresh process paced at 240,000 lines/s, the window held a spout long
// enough to double it to 2,048 or 4,096 in 12 runs of 26, and those runs
// had p99 of 7.5-24 ms against 2.3-5.3 in the others: once the spell was
// over, the spout caught up with a window's worth of lines in a topology
// already behind (docs/performance.md, round twenty-one). So after slow
// start the window doubles only for a spout that it has held back more
// than half the time over about the last second too (heldAvg), which a
// saturated spout is, and a paced one in a slow spell of under about
// 0.7 s is not: with the rule, 26 such first runs kept 512 and had p99
// of 2.5-9.7 ms. A spout that becomes saturated later gets its doublings
// that much later; one saturated from the start gets them in slow start,
// as before, or within a few periods if slow start ended early.
//
// Like TCP, it starts with a slow start that is not slow: until the first
// period in which the window did not hold the spout back more than half
// the time, periods last startPeriod, not windowPeriod. A spout saturated
// from its first record had 512, 1,024 and 2,048 trees for 50 ms each
// before it had the bound: the first 150 ms of every run, most of a short
// one (20,000 lines with 5% of the frames lost, where trees take 4 ms at
// p50, ran 1.4-2.5 times as long as without the window). A paced spout
// leaves slow start at its first short period, before anything stalls.
type pendingWindow struct {
	size, lo, hi int
	starting     bool          // in slow start
	from         time.Time     // start of the current period
	heldSince    time.Time     // when the spout was found held; zero while it is not
	held         time.Duration // time held in the current period, before heldSince
	heldAvg      float64       // share of the time held, averaged over about heldHorizon
}

// windowPeriod is how often the window is resized, startPeriod how often
// in slow start.
const (
	windowPeriod = 50 * time.Millisecond
	startPeriod  = 10 * time.Millisecond
)

// heldHorizon is the time constant of pendingWindow.heldAvg after slow
// start: a spout held throughout since it was not held at all has the
// window doubled after 0.7 s.
const heldHorizon = time.Second

func newPendingWindow(maxPending int, now time.Time) pendingWindow {
	lo := max(1, maxPending/8)
	return pendingWindow{size: lo, lo: lo, hi: maxPending, starting: lo < maxPending, from: now}
}

// admits reports whether a spout with n trees in flight may emit another
// root. wants says whether it has records to emit: a held spout that has
// none (its source exhausted, a checkpoint pausing it) is not held back by
// the window. It reads the clock only when the spout becomes held or stops
// being held.
func (w *pendingWindow) admits(n int, wants bool) bool {
	ok := n < w.size
	switch held := !ok && wants; {
	case held && w.heldSince.IsZero():
		w.heldSince = time.Now()
	case !held && !w.heldSince.IsZero():
		w.held += time.Since(w.heldSince)
		w.heldSince = time.Time{}
	}
	return ok
}

// resize ends the period at now if it is over and sizes the window for
// the next one.
func (w *pendingWindow) resize(now time.Time) {
	period := now.Sub(w.from)
	if period < windowPeriod && (!w.starting || period < startPeriod) {
		return
	}
	held := w.held
	if !w.heldSince.IsZero() {
		held += max(0, now.Sub(w.heldSince))
		w.heldSince = now
	}
	share := min(1, float64(held)/float64(period))
	weight := min(1, float64(period)/float64(heldHorizon))
	if w.starting {
		// Slow start's few short periods count half each, so that a
		// saturated spout whose slow start ended early (a period spent
		// emitting rather than held) goes on doubling within a period
		// or three, while a paced one, never held in its first period,
		// starts from nothing.
		weight = 0.5
	}
	w.heldAvg += (share - w.heldAvg) * weight
	switch {
	case held*2 > period && (w.starting || w.heldAvg > 0.5):
		w.size = min(w.hi, 2*w.size)
	case held*2 > period:
		// Held, but not for long enough to tell a saturated spout from
		// a slow spell: stay.
	case held*10 < period:
		w.size = max(w.lo, w.size/2)
	}
	w.starting = w.starting && held*2 > period && w.size < w.hi
	w.from, w.held = now, 0
}
