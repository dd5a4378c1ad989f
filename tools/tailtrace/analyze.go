package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// slowTree is the latency from which the runtime logs a tree (package
// workers, spoutExec.complete), the goal's p99.
const slowTree = 5 * time.Millisecond

// slowCategory is the category of those trace events.
const slowCategory = "ackflow.slow-tree"

// gcShadow is how long after a mark phase a slow tree is still counted as
// near it: the queues that grew during the phase take that long to drain.
const gcShadow = 50 * time.Millisecond

// spellGap is how far apart two slow trees may start and still belong to
// one spell.
const spellGap = 20 * time.Millisecond

type interval struct{ from, to float64 } // seconds since the trace began

type spell struct {
	interval
	trees int
	worst float64
}

type slowTreeEv struct{ start, latency float64 }

type report struct {
	span     float64
	gcs      []interval
	slow     []slowTreeEv
	nearGC   int
	spells   []spell
	coresIn  map[string]float64 // running seconds per second of spell
	coresOut map[string]float64 // per second of the rest
	delays   map[string][]time.Duration
}

// kind names a goroutine by the stack it blocks in.
func kind(stack string) string {
	switch {
	case strings.Contains(stack, "spoutExec).run"):
		return "spout"
	case strings.Contains(stack, "boltExec).run"):
		return "bolt"
	case strings.Contains(stack, "ackerExec).run"):
		return "acker"
	case strings.Contains(stack, "nats-server"):
		return "nats-server"
	case strings.Contains(stack, "nats%2ego") || strings.Contains(stack, "nats.go"):
		return "nats-client"
	case strings.Contains(stack, "gcBgMarkWorker"):
		return "gc"
	}
	return "other"
}

type goroutine struct {
	kind     string
	runSince float64 // when it last started running, -1 when not running
	ready    trace.Time
	runs     []interval
}

func analyze(r io.Reader) (*report, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	var t0, last trace.Time
	sec := func(t trace.Time) float64 { return time.Duration(t - t0).Seconds() }
	rep := &report{coresIn: map[string]float64{}, coresOut: map[string]float64{}, delays: map[string][]time.Duration{}}
	gs := map[trace.GoID]*goroutine{}
	markFrom := -1.0
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if t0 == 0 {
			t0 = ev.Time()
		}
		last = ev.Time()
		switch ev.Kind() {
		case trace.EventRangeBegin:
			if ev.Range().Name == "GC concurrent mark phase" {
				markFrom = sec(ev.Time())
			}
		case trace.EventRangeEnd:
			if ev.Range().Name == "GC concurrent mark phase" && markFrom >= 0 {
				rep.gcs = append(rep.gcs, interval{markFrom, sec(ev.Time())})
				markFrom = -1
			}
		case trace.EventLog:
			if l := ev.Log(); l.Category == slowCategory {
				us, err := strconv.ParseInt(l.Message, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("slow-tree event with message %q: %w", l.Message, err)
				}
				lat := float64(us) / 1e6
				rep.slow = append(rep.slow, slowTreeEv{sec(ev.Time()) - lat, lat})
			}
		case trace.EventStateTransition:
			st := ev.StateTransition()
			if st.Resource.Kind != trace.ResourceGoroutine {
				continue
			}
			id := st.Resource.Goroutine()
			g := gs[id]
			if g == nil {
				g = &goroutine{runSince: -1}
				gs[id] = g
			}
			from, to := st.Goroutine()
			if from == trace.GoRunning && g.kind == "" {
				var b strings.Builder
				for f := range ev.Stack().Frames() {
					b.WriteString(f.Func)
					b.WriteByte(';')
				}
				if b.Len() > 0 {
					g.kind = kind(b.String())
				}
			}
			switch {
			case to == trace.GoRunnable:
				g.ready = ev.Time()
			case to == trace.GoRunning:
				if from == trace.GoRunnable && g.ready != 0 {
					g.kindDelay(rep, time.Duration(ev.Time()-g.ready))
				}
				g.runSince = sec(ev.Time())
			}
			if from == trace.GoRunning && g.runSince >= 0 {
				g.runs = append(g.runs, interval{g.runSince, sec(ev.Time())})
				g.runSince = -1
			}
		}
	}
	if t0 == 0 {
		return nil, errors.New("the trace holds no events")
	}
	rep.span = sec(last)
	rep.finish(gs)
	return rep, nil
}

// kindDelay records a scheduling delay under the goroutine's kind; a
// goroutine that has not blocked yet has none and is left out.
func (g *goroutine) kindDelay(rep *report, d time.Duration) {
	if g.kind != "" {
		rep.delays[g.kind] = append(rep.delays[g.kind], d)
	}
}

func (r *report) finish(gs map[trace.GoID]*goroutine) {
	sort.Slice(r.slow, func(i, j int) bool { return r.slow[i].start < r.slow[j].start })
	shadow := gcShadow.Seconds()
	for _, s := range r.slow {
		for _, g := range r.gcs {
			if s.start+s.latency >= g.from && s.start <= g.to+shadow {
				r.nearGC++
				break
			}
		}
		if n := len(r.spells); n > 0 && s.start-r.spells[n-1].to <= spellGap.Seconds() {
			sp := &r.spells[n-1]
			sp.to = max(sp.to, s.start)
			sp.trees++
			sp.worst = max(sp.worst, s.latency)
			continue
		}
		r.spells = append(r.spells, spell{interval{s.start, s.start}, 1, s.latency})
	}
	in := r.spellTotal()
	out := r.span - in
	for _, g := range gs {
		k := g.kind
		if k == "" {
			k = "other"
		}
		for _, run := range g.runs {
			inside := 0.0
			for _, sp := range r.spells {
				inside += max(0, min(run.to, sp.to)-max(run.from, sp.from))
			}
			if in > 0 {
				r.coresIn[k] += inside / in
			}
			if out > 0 {
				r.coresOut[k] += (run.to - run.from - inside) / out
			}
		}
	}
	for _, d := range r.delays {
		slices.Sort(d)
	}
}

func (r *report) gcTotal() (t float64) {
	for _, g := range r.gcs {
		t += g.to - g.from
	}
	return t
}

func (r *report) gcLongest() (t float64) {
	for _, g := range r.gcs {
		t = max(t, g.to-g.from)
	}
	return t
}

func (r *report) spellTotal() (t float64) {
	for _, s := range r.spells {
		t += s.to - s.from
	}
	return t
}

func (r *report) largestSpells(n int) []spell {
	s := slices.Clone(r.spells)
	sort.Slice(s, func(i, j int) bool { return s[i].trees > s[j].trees })
	return s[:min(n, len(s))]
}

func (r *report) kindOrder() []string {
	var ks []string
	for k := range r.coresOut {
		ks = append(ks, k)
	}
	for k := range r.coresIn {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

func quantile(d []time.Duration, q float64) time.Duration {
	return d[int(q*float64(len(d)-1))]
}
