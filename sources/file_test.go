package sources_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

// line is one record a File spout should emit.
type line struct {
	Offset int64
	Text   string
}

// oracleLines computes what the File spout emits for content, without the
// spout's reader: every line without its "\n" or "\r\n", cut into pieces of
// maxLine bytes, each at its byte offset.
func oracleLines(content string, maxLine int) []line {
	var out []line
	for off := 0; off < len(content); {
		raw, terminated := content[off:], false
		if i := strings.IndexByte(raw, '\n'); i >= 0 {
			raw, terminated = raw[:i], true
		}
		text := raw
		if terminated {
			text = strings.TrimSuffix(raw, "\r")
		}
		for k := 0; k == 0 || k*maxLine < len(text); k++ {
			out = append(out, line{int64(off + k*maxLine), text[k*maxLine : min((k+1)*maxLine, len(text))]})
		}
		off += len(raw)
		if terminated {
			off++
		}
	}
	return out
}

func linesOf(c *collector) []line {
	out := make([]line, len(c.recs))
	for i, r := range c.recs {
		out[i] = line{r.ID.Offset, r.Values[0].(string)}
	}
	return out
}

// randomContent is n lines of 0 to 3*maxLine letters, some ending in
// "\r\n", some empty, some exactly maxLine long, the last one perhaps
// without a terminator.
func randomContent(n, maxLine int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 2))
	var b strings.Builder
	for i := range n {
		size := rng.IntN(3*maxLine + 1)
		switch rng.IntN(8) {
		case 0:
			size = 0
		case 1:
			size = maxLine
		}
		for range size {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		switch {
		case i == n-1 && seed%2 == 0: // no terminator
		case rng.IntN(4) == 0:
			b.WriteString("\r\n")
		default:
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var fileContents = []struct {
	name    string
	content string
	maxLine int
}{
	{"empty", "", 0},
	{"one line", "hello\n", 0},
	{"no final newline", "one\ntwo\nthree", 0},
	{"crlf", "one\r\ntwo\r\n\r\nfour\r\n", 0},
	{"empty lines", "\n\n\na\n\n", 0},
	{"lone carriage returns", "a\rb\n\r\n\r", 0},
	{"long lines cut", "abcdefghij\nabc\nabcdefgh\r\nabcdefghijklmnopq\n", 4},
	{"line exactly MaxLine", "abcd\nabcd\r\nab\n", 4},
	{"one byte pieces", "ab\r\nc\n\r\n", 1},
	{"one huge line", strings.Repeat("x", 200<<10), 64 << 10},
	{"random short lines", randomContent(3000, 40, 1), 40},
	{"random, no final newline", randomContent(3000, 40, 2), 40},
}

// TestFileTasksCoverEveryLineOnce reads each file with 1 to 4 tasks: the
// tasks together emit every line (and piece) once, each from its own range.
func TestFileTasksCoverEveryLineOnce(t *testing.T) {
	for _, fc := range fileContents {
		path := writeFile(t, fc.content)
		want := oracleLines(fc.content, cmp(fc.maxLine, sources.DefaultMaxLine))
		for p := 1; p <= 4; p++ {
			var got []line
			var read atomic.Int64
			for i := range p {
				var out collector
				s := sources.NewFile(sources.FileConfig{Path: path, MaxLine: fc.maxLine, Read: &read})
				open(t, s, taskContext(i, p, "at-least-once"), &out)
				drain(t, s)
				checkClose(t, s)
				lo, hi := int64(len(fc.content)*i/p), int64(len(fc.content)*(i+1)/p)
				for _, r := range out.recs {
					if r.Stream != topology.DefaultStream {
						t.Fatalf("%s: emitted on %q", fc.name, r.Stream)
					}
				}
				for _, l := range linesOf(&out) {
					if start := lineStartIn(fc.content, l.Offset); start < lo || start >= hi {
						t.Fatalf("%s: task %d of %d emitted the line at %d, which starts outside [%d, %d)", fc.name, i, p, start, lo, hi)
					}
				}
				got = append(got, linesOf(&out)...)
			}
			slices.SortFunc(got, func(a, b line) int { return int(a.Offset - b.Offset) })
			if !slices.Equal(got, want) {
				t.Fatalf("%s with %d tasks: got %d records, want %d\n got %v\nwant %v", fc.name, p, len(got), len(want), head(got), head(want))
			}
			if read.Load() != int64(len(fc.content)) {
				t.Fatalf("%s with %d tasks: Read counted %d bytes of %d", fc.name, p, read.Load(), len(fc.content))
			}
		}
	}
}

func cmp(v, dflt int) int {
	if v == 0 {
		return dflt
	}
	return v
}

// lineStartIn is where the line that holds byte off starts.
func lineStartIn(content string, off int64) int64 {
	return int64(strings.LastIndexByte(content[:off], '\n') + 1)
}

func head(ls []line) []line { return ls[:min(len(ls), 8)] }

func checkClose(t *testing.T, sp topology.Spout) {
	t.Helper()
	if err := sp.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestFileSeekContinuesWithTheSameIDs stops each task after its first
// Next and continues with a fresh spout through Position and Seek.
func TestFileSeekContinuesWithTheSameIDs(t *testing.T) {
	path := writeFile(t, randomContent(3000, 40, 3))
	for p := 1; p <= 4; p++ {
		for i := range p {
			newSpout := func() topology.Spout { return sources.NewFile(sources.FileConfig{Path: path, MaxLine: 40}) }
			checkPositioned(t, newSpout, taskContext(i, p, "exactly-once"), 1)
		}
	}
}

// TestFileSeeksToEveryRecord seeks to the offset of every record a task
// emits, pieces of long lines included, and checks the next record is
// that one.
func TestFileSeeksToEveryRecord(t *testing.T) {
	content := randomContent(300, 8, 5)
	path := writeFile(t, content)
	cfg := sources.FileConfig{Path: path, MaxLine: 8}
	for p := 1; p <= 3; p++ {
		for i := range p {
			tc := taskContext(i, p, "exactly-once")
			var all collector
			ref := sources.NewFile(cfg)
			open(t, ref, tc, &all)
			drain(t, ref)
			checkClose(t, ref)
			s := sources.NewFile(cfg)
			var out collector
			open(t, s, tc, &out)
			for k, want := range linesOf(&all) {
				out.recs = out.recs[:0]
				if err := s.Seek(binary.AppendUvarint(nil, uint64(want.Offset))); err != nil {
					t.Fatalf("task %d of %d, record %d: Seek(%d): %v", i, p, k, want.Offset, err)
				}
				nextOnce(t, s)
				if got := linesOf(&out); len(got) == 0 || got[0] != want {
					t.Fatalf("task %d of %d: after Seek(%d) the first record is %v, want %v", i, p, want.Offset, head(got), want)
				}
			}
			checkClose(t, s)
		}
	}
}

func TestFileSeekRefusesPositionsItDoesNotOwn(t *testing.T) {
	// Lines at 0 ("abcdefghij", in pieces at 0, 4 and 8), 11 ("ab"), 14
	// ("abcd", its "\r\n" taken along) and 20 ("xy"); 22 bytes. Task 0 of 2
	// owns the lines starting in [0, 11), task 1 the others.
	content := "abcdefghij\nab\nabcd\r\nxy"
	path := writeFile(t, content)
	for _, tc := range []struct {
		name      string
		index, of int
		offset    int64
		want      string
	}{
		{"before the range", 1, 2, 0, "outside the lines task 1 of 2 owns"},
		{"after the range", 0, 2, 14, "outside the lines task 0 of 2 owns"},
		{"beyond the file", 0, 1, 23, "outside"},
		{"inside a line", 0, 1, 3, "where no piece of 4 bytes starts"},
		{"at a terminator taken along", 0, 1, 18, "where no piece"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sources.NewFile(sources.FileConfig{Path: path, MaxLine: 4})
			open(t, s, taskContext(tc.index, tc.of, "exactly-once"), &collector{})
			defer s.Close()
			err := s.Seek(binary.AppendUvarint(nil, uint64(tc.offset)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Seek(%d) = %v, want an error saying %q", tc.offset, err, tc.want)
			}
		})
	}
	for _, ok := range []int64{0, 4, 8, 11, 14, 20, 22} {
		s := sources.NewFile(sources.FileConfig{Path: path, MaxLine: 4})
		open(t, s, taskContext(0, 1, "exactly-once"), &collector{})
		if err := s.Seek(binary.AppendUvarint(nil, uint64(ok))); err != nil {
			t.Fatalf("Seek(%d): %v", ok, err)
		}
		checkClose(t, s)
	}
	s := sources.NewFile(sources.FileConfig{Path: path})
	open(t, s, taskContext(0, 1, "exactly-once"), &collector{})
	defer s.Close()
	if err := s.Seek([]byte{0xff}); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("Seek of a truncated uvarint: %v", err)
	}
}

func TestFileConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  sources.FileConfig
		want string
	}{
		{"no path", sources.FileConfig{}, "Path is empty"},
		{"missing file", sources.FileConfig{Path: filepath.Join(dir, "nope.txt")}, "cannot open the input file"},
		{"directory", sources.FileConfig{Path: dir}, "is a directory"},
		{"negative MaxLine", sources.FileConfig{Path: "x", MaxLine: -1}, "MaxLine"},
		{"NaN rate", sources.FileConfig{Path: "x", LinesPerSec: math.NaN()}, "lines per second NaN"},
		{"negative rate", sources.FileConfig{Path: "x", LinesPerSec: -1}, "lines per second -1"},
		{"missing in FS", sources.FileConfig{Path: "b.txt", FS: fstest.MapFS{}}, "cannot open the input file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sources.NewFile(tc.cfg).Open(taskContext(0, 1, "at-least-once"), &collector{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sources: ") {
				t.Fatalf("Open = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestFileReadsAnFS(t *testing.T) {
	fsys := fstest.MapFS{"in/a.txt": {Data: []byte("x\ny\n")}}
	var out collector
	s := sources.NewFile(sources.FileConfig{FS: fsys, Path: "in/a.txt", Stream: "lines"})
	open(t, s, taskContext(0, 1, "at-least-once"), &out)
	drain(t, s)
	checkClose(t, s)
	want := []record{{"lines", topology.MsgID{Offset: 0}, topology.Values{"x"}}, {"lines", topology.MsgID{Offset: 2}, topology.Values{"y"}}}
	if fmt.Sprint(out.recs) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", out.recs, want)
	}
}

func TestFilePacing(t *testing.T) {
	path := writeFile(t, randomContent(1000, 10, 7))
	for _, tc := range []struct {
		rate  float64
		tasks int
		want  int // records the first Next emits
	}{
		{0, 1, 256},
		{math.Inf(1), 1, 256},
		{1e300, 1, 256},
		{math.MaxFloat64, 3, 256},
		{10, 1, 1},
		{10, 4, 1},
	} {
		var out collector
		s := sources.NewFile(sources.FileConfig{Path: path, LinesPerSec: tc.rate})
		open(t, s, taskContext(0, tc.tasks, "at-least-once"), &out)
		nextOnce(t, s)
		if len(out.recs) != tc.want {
			t.Fatalf("rate %v over %d tasks: the first Next emitted %d records, want %d", tc.rate, tc.tasks, len(out.recs), tc.want)
		}
		checkClose(t, s)
	}
}

// TestFileRunAtLeastOnce runs the File spout through the runtime, with
// frames lost and first deliveries failed, and checks every line reached
// the sink and nothing else did.
func TestFileRunAtLeastOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "line %d %s\n", i, strings.Repeat("x", i%50))
	}
	path := writeFile(t, b.String())
	want := oracleLines(b.String(), sources.DefaultMaxLine)

	sink := flowtest.NewSink().FailFirst(0.02)
	bld := topology.NewBuilder("file")
	bld.Spout("lines", func() topology.Spout { return sources.NewFile(sources.FileConfig{Path: path}) }, 3).Outputs("line")
	bld.Bolt("sink", sink.Bolt, 2).Input("lines", topology.Shuffle())
	topo, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce, Chaos: chaos.Config{Drop: 0.05, Seed: 3}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, v := range sink.Values() {
		seen[v[0].(string)]++
	}
	for _, l := range want {
		if seen[l.Text] == 0 {
			t.Fatalf("line %q never reached the sink", l.Text)
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("the sink saw %d different lines, the file has %d", len(seen), len(want))
	}
	if got := sum.Component("lines").Emitted; got != int64(len(want)) {
		t.Fatalf("the spouts emitted %d records, want %d", got, len(want))
	}
	if sink.Failures() == 0 {
		t.Fatal("the sink failed nothing: no replay was tested")
	}
}

func BenchmarkFileNext(b *testing.B) {
	content := randomContent(20000, 80, 9)
	path := filepath.Join(b.TempDir(), "input.txt")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		var out collector
		out.recs = make([]record, 0, 40000)
		s := sources.NewFile(sources.FileConfig{Path: path})
		if err := s.Open(taskContext(0, 1, "at-least-once"), &out); err != nil {
			b.Fatal(err)
		}
		for s.Next(context.Background()) == nil {
		}
		s.Close()
	}
}

// TestFileValuesAreTheirOwn: the lines' Values are carved from a shared
// slab, and each must still behave as its own slice: one value, no room
// to append into the next line's, and a change to one leaves the next
// as it was.
func TestFileValuesAreTheirOwn(t *testing.T) {
	content := randomContent(700, 20, 7) // more lines than a slab holds
	path := writeFile(t, content)
	var out collector
	s := sources.NewFile(sources.FileConfig{Path: path, MaxLine: 20})
	open(t, s, taskContext(0, 1, "at-least-once"), &out)
	drain(t, s)
	checkClose(t, s)
	if len(out.recs) < 600 {
		t.Fatalf("read %d records; the test wants more than a slab of values", len(out.recs))
	}
	for i := range out.recs[:len(out.recs)-1] {
		v, next := out.recs[i].Values, out.recs[i+1].Values
		if len(v) != 1 {
			t.Fatalf("record %d has %d values, want 1", i, len(v))
		}
		before := next[0]
		_ = append(v, "appended")
		v[0] = "changed"
		if next[0] != before {
			t.Fatalf("record %d's value became %q after an append to record %d and a change of its value", i+1, next[0], i)
		}
	}
}
