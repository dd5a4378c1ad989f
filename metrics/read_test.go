package metrics

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLabelsAndValueReadEveryKind reads back what a Prometheus registry
// gathers for each kind of sample.
func TestLabelsAndValueReadEveryKind(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"topology", "task"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	u := prometheus.NewUntypedFunc(prometheus.UntypedOpts{Name: "u", Help: "u"}, func() float64 { return -2.5 })
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h", Buckets: []float64{0.1, 1}})
	reg.MustRegister(c, g, u, h)
	c.WithLabelValues("wc", "3").Add(7)
	g.Set(0.25)
	for _, v := range []float64{0.05, 0.5, 5} {
		h.Observe(v)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"c_total": 7, "g": 0.25, "u": -2.5, "h_seconds": 3}
	for _, f := range fams {
		m := f.GetMetric()[0]
		if got := Value(m); got != want[f.GetName()] {
			t.Errorf("Value of %s = %v; want %v", f.GetName(), got, want[f.GetName()])
		}
		wantLabels := map[string]string{}
		if f.GetName() == "c_total" {
			wantLabels = map[string]string{"topology": "wc", "task": "3"}
		}
		if got := Labels(m); !maps.Equal(got, wantLabels) {
			t.Errorf("Labels of %s = %v; want %v", f.GetName(), got, wantLabels)
		}
	}
	if len(fams) != len(want) {
		t.Errorf("gathered %d families; want %d", len(fams), len(want))
	}
}
