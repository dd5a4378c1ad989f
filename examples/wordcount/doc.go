// Package wordcount is the classic streaming word count as an ackflow
// topology: a line spout, a split bolt and a count bolt grouped by word.
//
//	lines (sources.File) --shuffle--> split (SplitBolt) --fields(word)--> count (CountBolt)
//
// With no input file it reads a bundled public-domain text, Isaac Newton's
// Opticks (4th edition, 1730; the plain text of Project Gutenberg that the
// Go distribution also ships as src/testdata/Isaac.Newton-Opticks.txt).
//
// Run it with `go run ./cmd/ackflow run wordcount`.
package wordcount
