// Package metrics shows what the runtime counts to Prometheus: the metric
// families (their names, types, labels and meaning, listed by Names and
// documented in docs/metrics.md), a Registry that collects them from the
// runs of this process at scrape time, and a Server for /metrics.
//
// The runtime keeps its figures in plain atomics per task, updated on the
// hot path without labels or maps; a Source reads them only when Prometheus
// scrapes, and turns them into samples through a Writer. Runs come and go
// (local-mode worker restarts, cluster generations): a Source is added
// when a run starts and removed when it ends, and the Registry keeps what
// its counters and histograms had reached, so that a task's counters never
// go backwards while the process lives.
package metrics
