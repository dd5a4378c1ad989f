package bench

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Stalls is how often the machine took a processor away from a thread that
// had work: one goroutine per processor (GOMAXPROCS) spins reading the
// clock, and a gap between two readings is time the thread did not run. A
// quiet dedicated machine shows gaps of microseconds; a shared virtual
// machine shows its neighbours and its hypervisor, whether or not the
// kernel counts the time as stolen. No program avoids such a gap, so it
// is a floor under any latency percentile measured on the same machine:
// the latency row prints it beside its own figures.
type Stalls struct {
	// Seconds is how long each goroutine spun.
	Seconds float64 `json:"seconds"`
	// PerSec is the gaps longer than 1 ms per second and processor.
	PerSec float64 `json:"over_1ms_per_sec"`
	// LongestMs is the longest gap any goroutine saw.
	LongestMs float64 `json:"longest_ms"`
	// LostShare is the share of the time lost in gaps longer than 100 µs.
	LostShare float64 `json:"lost_share"`
}

// Gap lengths that Stalls counts: every gap over stallLost is lost time,
// and one over stallLong is a stall.
const (
	stallLost = 100 * time.Microsecond
	stallLong = time.Millisecond
)

// MeasureStalls spins on every processor for d (less if ctx ends first)
// and reports the gaps.
func MeasureStalls(ctx context.Context, d time.Duration) Stalls {
	procs := runtime.GOMAXPROCS(0)
	gaps := make([]gapCount, procs)
	var wg sync.WaitGroup
	for i := range gaps {
		wg.Go(func() { gaps[i] = spin(ctx, time.Now, d) })
	}
	wg.Wait()
	return sumGaps(gaps, d)
}

// gapCount is what one spinning goroutine saw.
type gapCount struct {
	long    int           // gaps over stallLong
	lost    time.Duration // the length of gaps over stallLost
	longest time.Duration
	spun    time.Duration
}

// spin reads now until d has passed since the first reading or ctx ends,
// and counts the gaps between readings. The context is looked at every
// 4,096 readings, which is microseconds.
func spin(ctx context.Context, now func() time.Time, d time.Duration) gapCount {
	var g gapCount
	start := now()
	last := start
	for i := 0; ; i++ {
		t := now()
		if gap := t.Sub(last); gap > stallLost {
			g.lost += gap
			g.longest = max(g.longest, gap)
			if gap > stallLong {
				g.long++
			}
		}
		last = t
		if t.Sub(start) >= d || (i&4095 == 0 && ctx.Err() != nil) {
			g.spun = t.Sub(start)
			return g
		}
	}
}

func sumGaps(gaps []gapCount, d time.Duration) Stalls {
	s := Stalls{Seconds: d.Seconds()}
	var long int
	var lost, spun time.Duration
	for _, g := range gaps {
		long += g.long
		lost += g.lost
		spun += g.spun
		s.LongestMs = max(s.LongestMs, ms(g.longest))
	}
	if spun > 0 {
		s.PerSec = float64(long) / spun.Seconds()
		s.LostShare = float64(lost) / float64(spun)
	}
	return s
}
