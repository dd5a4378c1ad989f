package workers

import (
	"slices"
	"testing"
	"time"
)

// TestRecoveriesArePerCrash: a crash's recovery runs from the crash to
// the end of the last failover that began after it and before the next
// crash (its slots moving away, then back when the node returns); a
// crash whose failovers never ended has none.
func TestRecoveriesArePerCrash(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name      string
		crashes   []int
		failovers [][2]int // at, done (ms)
		want      []int    // ms
	}{
		{"none", nil, [][2]int{{10, 20}}, nil},
		{"one move", []int{100}, [][2]int{{150, 300}}, []int{200}},
		{"away and back", []int{100}, [][2]int{{150, 300}, {700, 760}, {160, 250}}, []int{660}},
		{"two crashes", []int{100, 1000}, [][2]int{{150, 300}, {700, 760}, {1100, 1200}, {1600, 1650}}, []int{660, 650}},
		{"before the first crash", []int{500}, [][2]int{{100, 900}, {600, 700}}, []int{200}},
		{"the run ended first", []int{100, 1000}, [][2]int{{150, 300}}, []int{200}},
		{"a rollback", []int{100}, [][2]int{{600, 1400}}, []int{1300}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var crashes []time.Time
			for _, ms := range c.crashes {
				crashes = append(crashes, at(ms))
			}
			var fs []span
			for _, f := range c.failovers {
				fs = append(fs, span{at: at(f[0]), done: at(f[1])})
			}
			var want []time.Duration
			for _, ms := range c.want {
				want = append(want, time.Duration(ms)*time.Millisecond)
			}
			if got := recoveriesOf(crashes, fs); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}
