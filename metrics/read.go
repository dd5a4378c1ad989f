package metrics

import dto "github.com/prometheus/client_model/go"

// Labels returns the labels of a gathered or scraped sample, by name: what
// the status page and tests read samples with.
func Labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Value returns the value of a counter, gauge or untyped sample, or the
// number of observations of a histogram sample.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}
