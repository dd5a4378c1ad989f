package ui

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ackflow/ackflow/workers"
)

// Finding is one line of the explanation at the top of a topology.
type Finding struct {
	Level  string // "bad", "warn" or "ok"
	Title  string
	Detail string
}

// Capacity levels: a bolt busy this fraction of the last second is the
// bottleneck (Storm UI turns capacity red near 1), or getting there.
const (
	saturated = 0.8
	busy      = 0.5
)

// Explain says, most pressing first, why t may be slow or replaying: the
// errors workers report, user code that panics, records given up on,
// where failed trees come from, the bottleneck and a skewed one, flow
// control, failed checkpoints. It ends with what went right when nothing
// is wrong.
func Explain(t *Topology) []Finding {
	var out []Finding
	add := func(level, title, detail string) { out = append(out, Finding{level, title, detail}) }
	for _, e := range t.Errors {
		add("bad", "Error", e)
	}
	var spouts, bolts []Component
	for _, c := range t.Components {
		if c.Spout {
			spouts = append(spouts, c)
		} else {
			bolts = append(bolts, c)
		}
	}
	for _, c := range t.Components {
		if c.Panics > 0 {
			add("bad", fmt.Sprintf("%s panicked %s", c.Name, count(c.Panics, "time", "times")), "user code panicked; each input was failed (and its tree replayed) and the task went on")
		}
		if c.EmitErrors > 0 {
			add("bad", fmt.Sprintf("%s: %s refused", c.Name, count(c.EmitErrors, "emit", "emits")), "an undeclared stream, values of the wrong number or type, or a record too large; the inputs were failed or dead-lettered")
		}
	}
	if t.Generation > 1 && t.Reason != "" {
		from := "the beginning of the sources"
		if t.RestoredFrom > 0 {
			from = fmt.Sprintf("checkpoint %d", t.RestoredFrom)
		}
		add("warn", fmt.Sprintf("Generation %d: %s", t.Generation, t.Reason), fmt.Sprintf("every task started again from %s, and the sources replay what came after it; the figures count from then", from))
	}
	var dead, replayed, failed, timedOut int64
	for _, c := range spouts {
		dead += c.DeadLettered
		replayed += c.Replayed
		failed += c.Failed
		timedOut += c.TimedOut
	}
	if dead > 0 {
		where := "the dead letters"
		if t.DeadLetters != "" {
			where = t.DeadLetters
		}
		add("bad", fmt.Sprintf("%s given up on", count(dead, "record", "records")), fmt.Sprintf("they failed too many times (or were refused at emit) and went to %s with their errors", where))
	}
	if failed > 0 || replayed > 0 {
		add("warn", fmt.Sprintf("%s replayed after %s", count(replayed, "source record", "source records"), count(failed, "failed tree attempt", "failed tree attempts")), "what failed: "+causes(t, bolts, timedOut))
	}
	for _, c := range bolts {
		if c.DuplicatesDropped > 0 {
			detail := "replays brought inputs it had already processed; user code did not run again"
			if c.DedupSuspects > 0 {
				detail += fmt.Sprintf("; %s processed because no exact check confirmed them", count(c.DedupSuspects, "Bloom suspect was", "Bloom suspects were"))
			}
			add("ok", fmt.Sprintf("%s dropped %s", c.Name, count(c.DuplicatesDropped, "duplicate", "duplicates")), detail)
		}
	}
	out = append(out, bottleneck(t, bolts)...)
	if n := t.Transport.Backpressure; n > 0 {
		add("warn", fmt.Sprintf("Backpressure signalled %s", count(n, "time", "times")), "an inbox or a NATS backlog passed its high-water mark and the spouts paused; the busiest bolt above is the usual cause")
	}
	if n := t.Checkpoint.Failed; n > 0 {
		add("warn", fmt.Sprintf("%s abandoned", count(n, "checkpoint", "checkpoints")), "the spouts did not drain in time, a task failed or a rollback interrupted them; a failure now replays from the latest complete one")
	}
	if n := t.Transport.FencedFrames + t.Transport.FencedRecords; n > 0 {
		add("warn", fmt.Sprintf("%s of a stale epoch dropped", count(n, "frame or record", "frames or records")), "a worker paused or cut off past its lease, or replaced after a crash, sent them; fencing kept them out")
	}
	if n := t.Transport.Discarded; n > 0 {
		title := fmt.Sprintf("%s dropped by stopping tasks", count(n, "record", "records"))
		why := "tasks stopped or crashed (a new generation, a slot that moved, a failed task) with records queued for them or not yet sent"
		if t.Guarantee == workers.AtMostOnce.String() {
			add("bad", title, why+"; at most once does not replay them, so they are lost")
		} else {
			add("warn", title, why+"; their trees are replayed")
		}
	}
	if t.Recovery > 0 {
		add("ok", "Latest failover took "+dur(t.Recovery), "from losing a worker until its trees completed or its tasks began again elsewhere")
	}
	if !slices.ContainsFunc(out, func(f Finding) bool { return f.Level != "ok" }) {
		add("ok", "No failures, replays or dead letters", "every tree so far completed at its first attempt")
	}
	return out
}

// causes lists what failed trees: timeouts, inputs bolts failed, lost
// frames, crashed workers.
func causes(t *Topology, bolts []Component, timedOut int64) string {
	var parts []string
	if timedOut > 0 {
		parts = append(parts, fmt.Sprintf("%s out (the message timeout)", count(timedOut, "tree timed", "trees timed")))
	}
	var failing []string
	for _, c := range bolts {
		if c.Failed > 0 {
			failing = append(failing, fmt.Sprintf("%s %s", c.Name, num(c.Failed)))
		}
	}
	if len(failing) > 0 {
		parts = append(parts, "inputs failed by bolts ("+strings.Join(failing, ", ")+")")
	}
	if tr := t.Transport; tr.LostFrames > 0 {
		parts = append(parts, fmt.Sprintf("%s in transit and given up on", count(tr.LostFrames, "frame lost", "frames lost")))
	}
	if tr := t.Transport; tr.PublishErrors > 0 {
		parts = append(parts, fmt.Sprintf("%s that could not be sent", count(tr.PublishErrors, "frame", "frames")))
	}
	if t.Crashes > 0 {
		parts = append(parts, fmt.Sprintf("%s (their trees were failed at once)", count(t.Crashes, "worker crash", "worker crashes")))
	}
	if tr := t.Transport; tr.FrameNACKs > 0 {
		parts = append(parts, fmt.Sprintf("besides, %s noticed missing and %s resent without failing any tree", count(tr.FrameNACKs, "frame was", "frames were"), num(tr.FramesResent)))
	}
	if len(parts) == 0 {
		return "trees of workers that died or left, or failed before their inputs reached a bolt"
	}
	return strings.Join(parts, "; ")
}

// bottleneck names the busiest bolt and a task that does most of its
// component's work.
func bottleneck(t *Topology, bolts []Component) []Finding {
	i := slices.IndexFunc(bolts, func(c Component) bool { return c.Busiest })
	if i < 0 {
		return nil
	}
	c := bolts[i]
	var out []Finding
	switch {
	case c.Capacity >= saturated:
		out = append(out, Finding{"bad", fmt.Sprintf("%s is the bottleneck: capacity %.2f", c.Name, c.Capacity),
			fmt.Sprintf("its busiest task spent %.0f%% of the last second processing; add tasks (--parallelism %s=%d) or make it cheaper", 100*c.Capacity, c.Name, 2*c.Tasks)})
	case c.Capacity >= busy:
		out = append(out, Finding{"warn", fmt.Sprintf("%s is the busiest bolt: capacity %.2f", c.Name, c.Capacity), "it has headroom, but it will saturate first"})
	default:
		out = append(out, Finding{"ok", fmt.Sprintf("Busiest bolt: %s, capacity %.2f", c.Name, c.Capacity), "no bolt is near its limit"})
	}
	var caps []Task
	for _, tk := range t.Tasks {
		if tk.Component == c.Name {
			caps = append(caps, tk)
		}
	}
	if len(caps) < 2 {
		return out
	}
	var sum float64
	top := caps[0]
	for _, tk := range caps {
		sum += tk.Capacity
		if tk.Capacity > top.Capacity {
			top = tk
		}
	}
	if rest := (sum - top.Capacity) / float64(len(caps)-1); top.Capacity >= busy && top.Capacity >= 2*rest {
		out = append(out, Finding{"warn", fmt.Sprintf("%s[%d] does most of %s's work", c.Name, top.Index, c.Name),
			fmt.Sprintf("capacity %.2f against %.2f on average for its other %d tasks: a hot key in a fields grouping? more tasks will not help it", top.Capacity, rest, len(caps)-1)})
	}
	return out
}

// count writes n with the singular or the plural.
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return num(n) + " " + many
}

// num writes n with thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dur writes a duration for people, with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + " ms"
	case d < time.Minute:
		return sig3(d.Seconds()) + " s"
	}
	return d.Round(time.Second).String()
}

// sig3 writes v (positive, below 1000) with three significant digits and
// no exponent.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
