// Package soak holds the soak test (build tag soak, not in every CI run):
// `make soak` measures what word count sustains here (exactly-once, three
// workers, 10 s), then runs it for ten minutes at half of that
// (ACKFLOW_SOAK_RATE sets another rate), crashing a worker every 30
// seconds, over generated lines (line k is a function of k, so the spout
// seeks after a crash and the oracle counts the same lines; a file of
// them would take gigabytes), and samples the
// process's goroutines, heap, open files and log output every second; it
// writes the samples as CSV and an SVG plot and fails if any of them grows
// instead of staying flat, or if a count is wrong.
package soak
