package heapfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		live, scan, floor uint64
		percent           int
		want              int
	}{
		{live: 10 << 20, scan: 10 << 20, floor: 0, percent: 400, want: 400},
		{live: 10 << 20, scan: 10 << 20, floor: 256 << 20, percent: 400, want: 2460}, // goal 10 + 10*24.6 = 256 MB
		{live: 10 << 20, scan: 20 << 20, floor: 256 << 20, percent: 400, want: 1230}, // stacks and globals count too
		{live: 50 << 20, scan: 50 << 20, floor: 256 << 20, percent: 400, want: 412},
		{live: 60 << 20, scan: 60 << 20, floor: 256 << 20, percent: 400, want: 400}, // 60*5 = 300 > 256: GOGC as given
		{live: 300 << 20, scan: 300 << 20, floor: 256 << 20, percent: 100, want: 100},
		{live: 0, scan: 0, floor: 256 << 20, percent: 100, want: 100},
		{live: 1, scan: 1, floor: 256 << 20, percent: 100, want: 6400}, // the collector's 4 MiB minimum, times 64
		{live: 1 << 20, scan: 1 << 20, floor: 256 << 20, percent: 400, want: 6400},
	} {
		if got := Percent(tc.live, tc.scan, tc.floor, tc.percent); got != tc.want {
			t.Errorf("Percent(%d, %d, %d, %d) = %d, want %d", tc.live, tc.scan, tc.floor, tc.percent, got, tc.want)
		}
	}
}

// churn allocates total bytes of short-lived garbage in 4 KiB pieces while
// keeping about live bytes alive, and returns the collections it caused.
func churn(total, live int) uint32 {
	keep := make([][]byte, live/4096)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < total/4096; i++ {
		keep[i%len(keep)] = make([]byte, 4096)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return after.NumGC - before.NumGC
}

// TestFloorCollectsLessOften: with a small live heap and fast allocation,
// a floor of 64 MiB cuts the number of collections several times, and
// Stop gives GOGC back.
func TestFloorCollectsLessOften(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	runtime.GC()
	plain := churn(256<<20, 4<<20)

	tu := Start(64<<20, 100)
	runtime.GC() // a first cycle, so that the goal follows the live heap
	floored := churn(256<<20, 4<<20)
	tu.Stop()
	t.Logf("%d collections without a floor, %d with a 64 MiB floor", plain, floored)
	if plain < 10 {
		t.Fatalf("only %d collections without a floor for 256 MiB over a 4 MiB live heap: the test proves nothing", plain)
	}
	// 256 MiB over a 64 MiB goal is 4 collections; more than 8 means the
	// goal was not held up, none means it overshot the floor.
	if floored == 0 || floored > 8 {
		t.Fatalf("%d collections with the floor against %d without: want about 4 for a 64 MiB goal", floored, plain)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC is %d after Stop, want 100", got)
	}
}
