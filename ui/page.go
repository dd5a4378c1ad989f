package ui

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ackflow/ackflow/metrics"
)

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":       num,
	"num64":     func(n uint64) string { return num(int64(n)) },
	"rate":      func(v float64) string { return num(int64(math.Round(v))) },
	"mean":      func(h Histogram) string { return strconv.FormatFloat(h.MeanSeconds(), 'g', -1, 64) },
	"dur":       dur,
	"ago":       ago,
	"clock":     func(t time.Time) string { return t.Format("15:04:05") },
	"ratio":     func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) },
	"percent":   func(v float64) string { return strconv.FormatFloat(100*min(max(v, 0), 1), 'f', 0, 64) },
	"seconds":   func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) },
	"bytes":     bytesText,
	"sparkline": newSparkline,
	"level":     capacityLevel,
	"family":    family,
	"spouts":    func(cs []Component) []Component { return only(cs, true) },
	"bolts":     func(cs []Component) []Component { return only(cs, false) },
	"join":      strings.Join,
}).Parse(pageHTML))

// view is what the template renders.
type view struct {
	*Snapshot
	// Refresh is the seconds between reloads; 0 stops them.
	Refresh int
}

// Render writes the page of snap, reloading itself every refresh (0:
// never).
func Render(w io.Writer, snap *Snapshot, refresh time.Duration) error {
	return page.Execute(w, view{Snapshot: snap, Refresh: int(refresh.Round(time.Second) / time.Second)})
}

// family returns a metric family by name, for the data-metric attributes
// that tie the page's cells to /metrics.
func family(name string) (string, error) {
	for _, f := range metrics.Families() {
		if f.Name == name {
			return f.Name, nil
		}
	}
	return "", fmt.Errorf("ui: the page names %s, which is no metric family", name)
}

func only(cs []Component, spouts bool) []Component {
	var out []Component
	for _, c := range cs {
		if c.Spout == spouts {
			out = append(out, c)
		}
	}
	return out
}

// capacityLevel is the CSS class of a capacity.
func capacityLevel(v float64) string {
	switch {
	case v >= saturated:
		return "bad"
	case v >= busy:
		return "warn"
	}
	return "ok"
}

// ago writes how long before now t was, or "never".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	// A report written after the snapshot began is newer than its time.
	d := now.Sub(t)
	if d < time.Millisecond {
		return "just now"
	}
	return dur(d.Round(time.Millisecond)) + " ago"
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// sparkline is the throughput of the last minutes as an SVG polyline.
type sparkline struct {
	Width, Height int
	Points        string // the line
	Area          string // the area under it
	Now, Peak     float64
	Span          time.Duration
	Empty         bool
}

func newSparkline(rates []Rate) sparkline {
	s := sparkline{Width: 320, Height: 48, Empty: len(rates) < 2}
	if s.Empty {
		return s
	}
	for _, r := range rates {
		s.Peak = max(s.Peak, r.PerSec)
	}
	s.Now = rates[len(rates)-1].PerSec
	s.Span = rates[len(rates)-1].At.Sub(rates[0].At)
	top := s.Peak
	if top == 0 {
		top = 1
	}
	var pts []string
	for i, r := range rates {
		x := float64(s.Width) * float64(i) / float64(len(rates)-1)
		y := float64(s.Height-2) - float64(s.Height-4)*r.PerSec/top
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	s.Points = strings.Join(pts, " ")
	s.Area = fmt.Sprintf("0,%d %s %d,%d", s.Height, s.Points, s.Width, s.Height)
	return s
}
