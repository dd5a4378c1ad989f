package bench

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestSpinCountsGaps feeds spin a clock that ticks every 10 µs and jumps
// now and then: gaps of 100 µs or less are not counted, longer ones are
// lost time, and those over 1 ms are stalls.
func TestSpinCountsGaps(t *testing.T) {
	base := time.Unix(0, 0)
	at := base
	jumps := map[int]time.Duration{100: 50 * time.Microsecond, 200: 300 * time.Microsecond, 300: 2 * time.Millisecond, 400: 7 * time.Millisecond}
	i := 0
	clock := func() time.Time {
		i++
		step := 10 * time.Microsecond
		if j, ok := jumps[i]; ok {
			step = j
		}
		at = at.Add(step)
		return at
	}
	g := spin(context.Background(), clock, 20*time.Millisecond)
	if g.long != 2 || g.longest != 7*time.Millisecond || g.lost != 9300*time.Microsecond {
		t.Fatalf("got %d stalls, the longest %v, %v lost; want 2, 7ms, 9.3ms", g.long, g.longest, g.lost)
	}
	if g.spun < 20*time.Millisecond || g.spun > 20*time.Millisecond+10*time.Microsecond {
		t.Fatalf("spun %v, want 20ms", g.spun)
	}
	s := sumGaps([]gapCount{g, {spun: 20 * time.Millisecond}}, 20*time.Millisecond)
	if s.PerSec != 50 || s.LongestMs != 7 || math.Abs(s.LostShare-9.3/40) > 1e-3 {
		t.Fatalf("summed to %+v; want 50 stalls a second (2 in 40 ms of spinning), the longest 7 ms, 23%% lost", s)
	}
	if bad := (&Report{Latency: Latency{HostStalls: s}}).Impossible(); len(bad) > 0 {
		t.Fatalf("a possible measurement is called impossible: %q", bad)
	}
}

// TestMeasureStallsStopsWithItsContext: a cancelled context ends the
// spinning at once, not after the duration asked for.
func TestMeasureStallsStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	s := MeasureStalls(ctx, time.Minute)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("spun for %v after the context ended", d)
	}
	if s.LostShare < 0 || s.LostShare > 1 {
		t.Fatalf("lost share %v", s.LostShare)
	}
}
