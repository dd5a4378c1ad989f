package metrics

import (
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Source is something that writes samples when Prometheus scrapes: one
// run of a topology in this process, for example. WriteMetrics runs while
// the source goes on, so it reads atomics or takes the locks the source
// already has; it must not call back into the Registry.
type Source interface {
	WriteMetrics(w *Writer)
}

// SourceFunc makes a function a Source.
type SourceFunc func(w *Writer)

// WriteMetrics implements Source.
func (f SourceFunc) WriteMetrics(w *Writer) { f(w) }

// Registry collects the samples of its sources at each scrape, together
// with the Go runtime's and the process's own metrics. Create one with
// NewRegistry and serve it with Listen (or Handler).
type Registry struct {
	reg *prometheus.Registry

	// mu guards the sources and what removed sources left; it is held
	// while sources write, so a source removed during a scrape is either
	// wholly in it, live or retired, never both or neither.
	mu      sync.Mutex
	next    int
	sources map[int]Source
	retired *Writer
}

// NewRegistry returns a registry of its own (not Prometheus's global
// default one, which a program embedding ackflow may use for itself) with
// the Go and process collectors and the ackflow families.
func NewRegistry() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), sources: map[int]Source{}, retired: newWriter()}
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), (*collector)(r))
	return r
}

// Prometheus returns the underlying registry, to add collectors of one's
// own or to gather without HTTP.
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// Add makes s part of every scrape until remove is called. Remove keeps
// what s's counters and histograms reached: a source that ends (a run, a
// generation) does not take its counts with it, and a later source
// writing the same series adds to them. Its gauges go with it. Remove may
// be called more than once.
func (r *Registry) Add(s Source) (remove func()) {
	r.mu.Lock()
	id := r.next
	r.next++
	r.sources[id] = s
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			last := newWriter()
			s.WriteMetrics(last)
			for k, smp := range last.samples {
				if smp.f.Type != Gauge {
					r.retired.merge(k, smp)
				}
			}
			delete(r.sources, id)
		})
	}
}

// snapshot is every sample of this scrape: what removed sources left plus
// what the live ones write now.
func (r *Registry) snapshot() *Writer {
	w := newWriter()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, smp := range r.retired.samples {
		w.merge(k, smp)
	}
	for _, s := range r.sources {
		s.WriteMetrics(w)
	}
	return w
}

// collector is the Registry as Prometheus sees it.
type collector Registry

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range families {
		ch <- f.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range (*Registry)(c).snapshot().samples {
		ch <- s.metric()
	}
}

// Writer takes the samples of one scrape. Samples of a family with the
// same label values add up.
type Writer struct {
	samples map[string]*sample
}

type sample struct {
	f      *Family
	labels []string
	value  float64
	counts []uint64 // histograms: per bucket, not cumulative
	sum    float64  // histograms: seconds
}

func newWriter() *Writer { return &Writer{samples: map[string]*sample{}} }

// key identifies a series; label values cannot hold the separator.
func key(f *Family, labels []string) string {
	return f.Name + "\xff" + strings.Join(labels, "\xff")
}

func (w *Writer) get(f *Family, labels []string) *sample {
	if len(labels) != len(f.Labels) {
		// A bug in the runtime, caught by the tests that scrape.
		panic(fmt.Sprintf("metrics: %s takes labels %q, got %q", f.Name, f.Labels, labels))
	}
	k := key(f, labels)
	s := w.samples[k]
	if s == nil {
		s = &sample{f: f, labels: append([]string(nil), labels...)}
		if f.Type == Histogram {
			s.counts = make([]uint64, len(f.bounds)+1)
		}
		w.samples[k] = s
	}
	return s
}

// Add adds v to the series of f (a counter or a gauge) with labels.
func (w *Writer) Add(f *Family, v float64, labels ...string) {
	if f.Type == Histogram {
		panic("metrics: " + f.Name + " is a histogram; use AddHistogram")
	}
	w.get(f, labels).value += v
}

// AddHistogram adds h's counts to its family's series with labels.
func (w *Writer) AddHistogram(h *LatencyHistogram, labels ...string) {
	s := w.get(h.f, labels)
	for i := range h.counts {
		s.counts[i] += h.counts[i].Load()
	}
	s.sum += float64(h.sum.Load()) / 1e9
}

func (w *Writer) merge(k string, from *sample) {
	s := w.samples[k]
	if s == nil {
		s = &sample{f: from.f, labels: from.labels}
		if from.counts != nil {
			s.counts = make([]uint64, len(from.counts))
		}
		w.samples[k] = s
	}
	s.value += from.value
	for i, n := range from.counts {
		s.counts[i] += n
	}
	s.sum += from.sum
}

func (s *sample) metric() prometheus.Metric {
	switch s.f.Type {
	case Counter:
		return prometheus.MustNewConstMetric(s.f.desc, prometheus.CounterValue, s.value, s.labels...)
	case Gauge:
		return prometheus.MustNewConstMetric(s.f.desc, prometheus.GaugeValue, s.value, s.labels...)
	}
	// The count is the buckets' total, so that it always equals the +Inf
	// bucket even though the task observes while they are read.
	buckets := make(map[float64]uint64, len(s.f.Buckets))
	var n uint64
	for i, c := range s.counts {
		n += c
		if i < len(s.f.Buckets) {
			buckets[s.f.Buckets[i]] = n
		}
	}
	return prometheus.MustNewConstHistogram(s.f.desc, n, s.sum, buckets, s.labels...)
}
