// Package sources holds ready-made spouts. Sources must be replayable for
// at-least-once (DESIGN.md section 8): each one names its records by their
// position, so a replay carries the same message ID and record ID.
//
// Sequence is the generator source: record i of n, made by a function of i.
// Benchmarks and tests use it, and it is a template for a user's own spout.
package sources
