package ui

import (
	"strings"
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	spout := Component{Name: "lines", Spout: true, Tasks: 1, Emitted: 1000, Acked: 990}
	split := Component{Name: "split", Tasks: 2, Executed: 900, Capacity: 0.3, HasCapacity: true}
	count := Component{Name: "count", Tasks: 2, Executed: 5000, Capacity: 0.92, HasCapacity: true, Busiest: true}
	cases := []struct {
		name string
		t    Topology
		want []string // level: start of a title, in order
		not  []string
	}{
		{name: "healthy", t: Topology{Components: []Component{spout, split, with(count, func(c *Component) { c.Capacity = 0.1 })}},
			want: []string{"ok:Busiest bolt: count, capacity 0.10", "ok:No failures, replays or dead letters"}},
		{name: "bottleneck and skew", t: Topology{Components: []Component{spout, split, count},
			Tasks: []Task{{Component: "count", Index: 0, Capacity: 0.1}, {Component: "count", Index: 1, Capacity: 0.92}}},
			want: []string{"bad:count is the bottleneck: capacity 0.92", "warn:count[1] does most of count's work"}, not: []string{"ok:No failures"}},
		{name: "busy without skew", t: Topology{Components: []Component{spout, with(count, func(c *Component) { c.Capacity = 0.6 })},
			Tasks: []Task{{Component: "count", Capacity: 0.55}, {Component: "count", Index: 1, Capacity: 0.6}}},
			want: []string{"warn:count is the busiest bolt"}, not: []string{"warn:count[1]"}},
		{name: "replays and their causes", t: Topology{Crashes: 2, Transport: Transport{LostFrames: 3, FrameNACKs: 40, FramesResent: 38},
			Components: []Component{with(spout, func(c *Component) { c.Failed, c.Replayed, c.TimedOut = 120, 115, 7 }),
				with(split, func(c *Component) { c.Failed = 1200 }), with(count, func(c *Component) { c.Capacity, c.DuplicatesDropped = 0.2, 64 })}},
			want: []string{"warn:115 source records replayed after 120 failed tree attempts", "ok:count dropped 64 duplicates", "ok:Busiest bolt"}},
		{name: "given up", t: Topology{DeadLetters: "dead.jsonl", Errors: []string{"worker w2: cannot restore"},
			Components: []Component{with(spout, func(c *Component) { c.DeadLettered, c.Failed, c.Replayed = 5, 50, 45 }), with(split, func(c *Component) { c.Panics = 9 })}},
			want: []string{"bad:Error", "bad:split panicked 9 times", "bad:5 records given up on", "warn:45 source records replayed"}},
		{name: "a new generation", t: Topology{Generation: 4, Reason: "worker w3 left", RestoredFrom: 17, Components: []Component{spout}},
			want: []string{"warn:Generation 4: worker w3 left"}, not: []string{"ok:No failures"}},
		{name: "flow control and checkpoints", t: Topology{Transport: Transport{Backpressure: 12, FencedFrames: 2}, Checkpoint: Checkpoint{Failed: 3}, Recovery: 800 * time.Millisecond,
			Components: []Component{spout}},
			want: []string{"warn:Backpressure signalled 12 times", "warn:3 checkpoints abandoned", "warn:2 frames or records of a stale epoch", "ok:Latest failover took 800 ms"}},
		{name: "stopping tasks replay what they dropped", t: Topology{Guarantee: "at-least-once", Transport: Transport{Discarded: 40}, Components: []Component{spout}},
			want: []string{"warn:40 records dropped by stopping tasks"}, not: []string{"bad:", "ok:No failures"}},
		{name: "at most once loses what stopping tasks dropped", t: Topology{Guarantee: "at-most-once", Transport: Transport{Discarded: 1}, Components: []Component{spout}},
			want: []string{"bad:1 record dropped by stopping tasks"}, not: []string{"ok:No failures"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Explain(&c.t)
			var lines []string
			for _, f := range got {
				lines = append(lines, f.Level+":"+f.Title)
			}
			at := 0
			for _, w := range c.want {
				i := at
				for i < len(lines) && !strings.HasPrefix(lines[i], w) {
					i++
				}
				if i == len(lines) {
					t.Fatalf("no finding %q after the %dth in:\n%s", w, at, strings.Join(lines, "\n"))
				}
				at = i + 1
			}
			for _, n := range c.not {
				for _, l := range lines {
					if strings.HasPrefix(l, n) {
						t.Errorf("finding %q should not be there:\n%s", l, strings.Join(lines, "\n"))
					}
				}
			}
		})
	}
	// The causes of replays are spelled out.
	f := Explain(&cases[3].t)
	detail := f[0].Detail
	for _, want := range []string{"7 trees timed out", "split 1,200", "3 frames lost", "2 worker crashes", "40 frames were noticed missing and 38 resent"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the causes do not say %q: %s", want, detail)
		}
	}
}

func with(c Component, f func(*Component)) Component {
	f(&c)
	return c
}

func TestNumbersAndDurationsForPeople(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 12345678901: "12,345,678,901"} {
		if got := num(n); got != want {
			t.Errorf("num(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", 3120 * time.Nanosecond: "3.12 µs", 999999 * time.Nanosecond: "1000 µs",
		17200 * time.Microsecond: "17.2 ms", 2500 * time.Millisecond: "2.50 s", 95 * time.Second: "1m35s"} {
		if got := dur(d); got != want {
			t.Errorf("dur(%v) = %q, want %q", d, got, want)
		}
	}
}
