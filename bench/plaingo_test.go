package bench

import (
	"context"
	"testing"

	"github.com/ackflow/ackflow/examples/wordcount"
)

// TestPlainGoRow: the floor row counts every word of the input, and its
// records are the lines and words a word count topology moves.
func TestPlainGoRow(t *testing.T) {
	s := &suite{dir: t.TempDir(), rep: &Report{}}
	if err := s.prepareInput(1); err != nil {
		t.Fatal(err)
	}
	if err := s.plainGo(context.Background()); err != nil {
		t.Fatal(err)
	}
	row := s.rep.Row("plain-go")
	if row == nil || row.Lost != 0 || row.RecordsPerSec <= 0 {
		t.Fatalf("plain-go row: %+v", row)
	}
	lines, err := s.inputLines(s.lines)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(lines))
	for _, l := range lines {
		want += int64(len(wordcount.SplitWords(l)))
	}
	if row.Records != want {
		t.Fatalf("plain-go moved %d records, the topology moves %d (lines and words)", row.Records, want)
	}
	// The later runs, between the guarantees' rounds, keep one row at the
	// best rate.
	first := row.RecordsPerSec
	s.plainGoRun()
	s.plainGoRun()
	n := 0
	for _, r := range s.rep.Rows {
		if r.Name == "plain-go" {
			n++
		}
	}
	if row = s.rep.Row("plain-go"); n != 1 || row.RecordsPerSec < first || row.Records != want {
		t.Fatalf("after three runs: %d plain-go rows, %+v (first run %.0f records/s)", n, row, first)
	}
	s.relate(row)
	if row.VsPlainGo != 1 {
		t.Fatalf("plain-go relative to itself: %v", row.VsPlainGo)
	}
}
