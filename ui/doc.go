// Package ui is ackflow's status page, in the spirit of Storm UI: one
// server-rendered HTML page with its CSS and an SVG sparkline inline, no
// script and nothing fetched from elsewhere, so it works offline and
// behind any firewall. It refreshes itself with a meta refresh.
//
// The page shows a Snapshot: per topology, Storm UI's figures per
// component (emitted, acked, failed, replayed, complete latency,
// capacity) plus duplicates dropped, dead letters and pending trees; every
// task with its owner and fencing epoch; the workers and their latest
// heartbeats or reports; the latest checkpoint; the throughput of the
// last minutes; and, first, what explains a slow or replaying topology
// (Explain): the busiest bolt, where failures come from, what was given up.
//
// A Source makes snapshots. Local reads a local run: its component
// figures come from the run's metrics registry, gathered as a scrape of
// /metrics would gather them, so that the page and /metrics agree by
// construction; its workers and tasks from a workers.LocalView. Cluster
// reads a cluster through NATS alone: the submitted topologies, their
// generations and leaders, the members, and what every worker reports of
// its part (workers.Report), added up per component.
//
// Listen serves a Source: the page on /, and /metrics too when given a
// handler (ackflow run --ui serves the run's registry there).
package ui
