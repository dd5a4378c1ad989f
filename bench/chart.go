package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ThroughputBar is one run in the throughput panel, e.g. "raw NATS",
// "JetStream chain" or "ackflow at-least-once".
type ThroughputBar struct {
	Name string
	// RecordsPerSec is records (or, for raw NATS, messages) per second.
	RecordsPerSec float64
}

// LatencyBar is one percentile in the latency panel, e.g. "p50", "p99",
// "p99.9".
type LatencyBar struct {
	Name   string
	Millis float64
}

// Chart holds the figures of one run for WriteSVG.
type Chart struct {
	Throughput []ThroughputBar
	Latency    []LatencyBar
}

// Chart geometry: two panels side by side on a page that reads well in a
// README or a browser tab.
const (
	chartWidth  = 11 * vg.Inch
	chartHeight = 4.5 * vg.Inch
)

// WriteSVG draws c as one SVG document: a bar chart of throughput by run
// next to a bar chart of latency percentiles, each bar labelled with its
// value. A panel with no bars is left out.
func WriteSVG(w io.Writer, c Chart) error {
	canvas := vgsvg.New(chartWidth, chartHeight)
	if err := drawChart(draw.New(canvas), c); err != nil {
		return err
	}
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("bench: writing the chart's SVG: %w", err)
	}
	return nil
}

// drawChart draws c on dc, whatever the output format.
func drawChart(dc draw.Canvas, c Chart) error {
	var panels []*plot.Plot
	if len(c.Throughput) > 0 {
		bars := make([]bar, len(c.Throughput))
		for i, b := range c.Throughput {
			bars[i] = bar{b.Name, b.RecordsPerSec}
		}
		p, err := barPanel("Throughput", "records / s", bars, formatRate)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(c.Latency) > 0 {
		bars := make([]bar, len(c.Latency))
		for i, b := range c.Latency {
			bars[i] = bar{b.Name, b.Millis}
		}
		p, err := barPanel("Latency", "milliseconds", bars, formatMillis)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return errors.New("bench: the chart has no bars; fill Chart.Throughput or Chart.Latency")
	}

	// Each plot paints only its own tile; the margins between them would
	// otherwise be transparent, which reads badly on a dark page.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{
		Rows: 1, Cols: len(panels),
		PadTop: vg.Millimeter * 4, PadBottom: vg.Millimeter * 4,
		PadLeft: vg.Millimeter * 4, PadRight: vg.Millimeter * 4,
		PadX: vg.Millimeter * 12,
	}
	// Align gives the panels' data areas the same size, so the two charts
	// line up however long their tick labels are.
	tiled := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(tiled[0][i])
	}
	return nil
}

var barColor = color.RGBA{R: 0x2b, G: 0x6c, B: 0xb0, A: 0xff}

type bar struct {
	name  string
	value float64
}

func barPanel(title, unit string, bars []bar, format func(float64) string) (*plot.Plot, error) {
	names := make([]string, len(bars))
	values := make(plotter.Values, len(bars))
	labels := plotter.XYLabels{XYs: make(plotter.XYs, len(bars)), Labels: make([]string, len(bars))}
	top := 0.0
	for i, b := range bars {
		if b.value < 0 || math.IsNaN(b.value) || math.IsInf(b.value, 0) {
			return nil, fmt.Errorf("bench: %s bar %q has value %v; want a finite value >= 0", title, b.name, b.value)
		}
		names[i] = b.name
		values[i] = b.value
		labels.XYs[i] = plotter.XY{X: float64(i), Y: b.value}
		labels.Labels[i] = format(b.value)
		top = math.Max(top, b.value)
	}

	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Y.Label.Text = unit
	p.Y.Tick.Marker = formattedTicks(format)
	p.Y.Min = 0
	// Headroom for the value labels above the tallest bar; an all-zero
	// panel still needs a range to draw.
	p.Y.Max = math.Max(top*1.15, 1)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil // vertical lines would cut through the bars
	p.Add(grid)

	// Bars share the panel's width; narrow ones for many runs, capped so
	// that two bars do not look like slabs.
	width := vg.Length(math.Min(48, math.Max(6, 400/(1.6*float64(len(bars))))))
	chart, err := plotter.NewBarChart(values, width)
	if err != nil {
		return nil, fmt.Errorf("bench: drawing the %s bars: %w", title, err)
	}
	chart.Color = barColor
	chart.LineStyle.Width = 0
	p.Add(chart)

	lbl, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("bench: drawing the %s value labels: %w", title, err)
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i] = text.Style{
			Font:    font.From(plotter.DefaultFont, vg.Points(9)),
			Handler: plot.DefaultTextHandler,
			XAlign:  draw.XCenter,
			YAlign:  draw.YBottom,
			Color:   color.Black,
		}
	}
	lbl.Offset = vg.Point{Y: vg.Points(3)}
	p.Add(lbl)

	// Long run names would run into each other. Slanted labels were tried,
	// but SVG renderers place rotated text differently from what plot
	// measures, so long names break onto a second line at a hyphen instead.
	wrapped := make([]string, len(names))
	for i, n := range names {
		wrapped[i] = wrapName(n)
	}
	p.NominalX(wrapped...)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	return p, nil
}

// wrapName breaks a name longer than 10 characters at the hyphen nearest its
// middle, so that five bar labels fit side by side.
func wrapName(n string) string {
	if len(n) <= 10 {
		return n
	}
	best := -1
	for i := 0; i < len(n); i++ {
		if n[i] == '-' && (best < 0 || abs(i-len(n)/2) < abs(best-len(n)/2)) {
			best = i
		}
	}
	if best < 0 {
		return n
	}
	return n[:best+1] + "\n" + n[best+1:]
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// formattedTicks keeps plot's choice of tick positions and writes their
// labels the way the bars' value labels are written.
func formattedTicks(format func(float64) string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ticks := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ticks {
			if ticks[i].Label != "" { // an empty label marks a minor tick
				ticks[i].Label = format(ticks[i].Value)
			}
		}
		return ticks
	})
}

// formatRate writes a rate with a k or M suffix and at most three
// significant digits: 1.23M, 456k, 78.9k, 2M, 950.
func formatRate(v float64) string {
	switch {
	case v >= 1e6:
		return trimFloat(v/1e6) + "M"
	case v >= 1e3:
		return trimFloat(v/1e3) + "k"
	default:
		return trimFloat(v)
	}
}

// formatMillis writes milliseconds with at most three significant digits
// and no exponent: 0.421, 12.5, 4.2, 1200.
func formatMillis(v float64) string { return trimFloat(v) }

// trimFloat writes v with three significant digits (all the digits of a
// number of 1000 or more) and no trailing zeros, so that tick labels read
// 2M rather than 2.00M.
func trimFloat(v float64) string {
	var s string
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	default:
		// 'f' with 3 significant digits: 'g' would switch to an exponent
		// below 0.0001.
		s = strconv.FormatFloat(v, 'f', max(0, 2-int(math.Floor(math.Log10(v)))), 64)
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
