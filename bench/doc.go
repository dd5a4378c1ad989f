// Package bench measures ackflow against the designs a NATS user would
// otherwise build, as ratios measured in one run.
//
// Absolute figures depend on the machine, so every comparison in DESIGN.md
// (section 11) is a ratio between runs made in the same process against the
// same server: the baselines here (raw core NATS publish/subscribe, and a word
// count built from chained JetStream streams) and the ackflow topologies that
// must beat them. WriteSVG renders the figures of one run as a chart.
package bench
