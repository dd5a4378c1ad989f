package wordcount

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/ackflow/ackflow/topology"
)

//go:embed opticks.txt
var bundled []byte

// Bundled returns the embedded text read when no input file is given.
func Bundled() []byte { return bundled }

// Config chooses the input and the parallelism of each component.
type Config struct {
	Input string // path of a text file; empty reads the bundled text
	// Parallelism of lines, split and count (0 means 1, 2, 2).
	Lines, Split, Count int
	// LineBytes caps a record's size: a longer line is emitted in pieces of
	// at most LineBytes, so one record never grows without bound (a word
	// that straddles a cut counts as two). Default 1 MiB.
	LineBytes int
	// LinesPerSec paces the spouts (all tasks together); 0 reads as fast as
	// flow control allows. Benchmarks use it to measure latency at a given
	// load.
	LinesPerSec float64
}

// Job is a built word count: its topology, the counts it produces, and how
// far its spouts have read.
type Job struct {
	Topology *topology.Topology
	Counts   *Counts
	// TotalBytes is the size of the input; ReadBytes grows as spouts read.
	TotalBytes int64
	readBytes  atomic.Int64
}

// ReadBytes is how many input bytes the spouts have read so far.
func (j *Job) ReadBytes() int64 { return j.readBytes.Load() }

// New builds the word count topology over cfg.Input.
func New(cfg Config) (*Job, error) {
	if cfg.Lines == 0 {
		cfg.Lines = 1
	}
	if cfg.Split == 0 {
		cfg.Split = 2
	}
	if cfg.Count == 0 {
		cfg.Count = 2
	}
	if cfg.LineBytes == 0 {
		cfg.LineBytes = 1 << 20
	}
	job := &Job{Counts: &Counts{m: map[string]int64{}}}
	var open func() (io.ReadSeekCloser, error)
	if cfg.Input == "" {
		job.TotalBytes = int64(len(bundled))
		open = func() (io.ReadSeekCloser, error) { return nopCloser{bytes.NewReader(bundled)}, nil }
	} else {
		st, err := os.Stat(cfg.Input)
		if err != nil {
			return nil, fmt.Errorf("wordcount: cannot read input: %w", err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("wordcount: input %s is a directory; give a text file", cfg.Input)
		}
		job.TotalBytes = st.Size()
		path := cfg.Input
		open = func() (io.ReadSeekCloser, error) { return os.Open(path) }
	}
	b := topology.NewBuilder("wordcount")
	b.Spout("lines", func() topology.Spout {
		return &LineSpout{open: open, size: job.TotalBytes, maxLine: cfg.LineBytes, read: &job.readBytes, rate: cfg.LinesPerSec / float64(cfg.Lines)}
	}, cfg.Lines).Outputs("line")
	b.BasicBolt("split", func() topology.BasicBolt { return &SplitBolt{} }, cfg.Split).
		Input("lines", topology.Shuffle()).Outputs("word")
	b.BasicBolt("count", func() topology.BasicBolt { return &CountBolt{sink: job.Counts} }, cfg.Count).
		Input("split", topology.Fields("word"))
	topo, err := b.Build()
	if err != nil {
		return nil, err
	}
	job.Topology = topo
	return job, nil
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// LineSpout emits the lines of one byte range of the input: task i of n
// reads the lines that start in [i*size/n, (i+1)*size/n). A record's
// message ID is the byte offset of its line, so replays are recognisable.
type LineSpout struct {
	open    func() (io.ReadSeekCloser, error)
	size    int64
	maxLine int
	read    *atomic.Int64
	rate    float64 // lines per second for this task; 0: unpaced

	started time.Time
	lines   int64

	f        io.ReadSeekCloser
	r        *bufio.Reader
	pos, end int64
	midLine  bool // the last piece read ended inside an over-long line
	out      topology.SpoutCollector
}

// Open seeks to the start of the task's range (the first line that starts
// in it).
func (s *LineSpout) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	f, err := s.open()
	if err != nil {
		return fmt.Errorf("wordcount: %w", err)
	}
	s.f, s.out = f, out
	start := s.size * int64(tc.Index) / int64(tc.Parallelism)
	s.end = s.size * int64(tc.Index+1) / int64(tc.Parallelism)
	s.r = bufio.NewReaderSize(f, 64<<10)
	if start > 0 {
		// A line that starts before our range belongs to the previous task:
		// skip to the first line that starts at or after start.
		if _, err := f.Seek(start-1, io.SeekStart); err != nil {
			return fmt.Errorf("wordcount: %w", err)
		}
		s.r.Reset(f)
		s.pos = start - 1
		for {
			c, err := s.r.ReadByte()
			if err == io.EOF {
				s.pos = s.end
				break
			}
			if err != nil {
				return fmt.Errorf("wordcount: %w", err)
			}
			s.pos++
			if c == '\n' {
				break
			}
		}
	}
	return nil
}

// Next emits up to 256 lines, fewer when paced.
func (s *LineSpout) Next(ctx context.Context) error {
	n := 256
	if s.rate > 0 {
		if s.started.IsZero() {
			s.started = time.Now()
		}
		due := int64(time.Since(s.started).Seconds()*s.rate) + 1
		n = int(min(int64(n), due-s.lines))
	}
	for i := 0; i < n; i++ {
		if s.pos >= s.end && !s.midLine {
			return topology.ErrExhausted
		}
		line, err := s.readLine()
		if len(line) > 0 || err == nil {
			start := s.pos
			s.pos += int64(len(line))
			s.midLine = len(line) > 0 && line[len(line)-1] != '\n'
			s.read.Add(int64(len(line)))
			text := strings.TrimRight(string(line), "\r\n")
			s.out.Emit(topology.MsgID{Offset: start}, topology.Values{text})
			s.lines++
		}
		if err == io.EOF {
			return topology.ErrExhausted
		}
		if err != nil {
			return fmt.Errorf("wordcount: reading input: %w", err)
		}
	}
	return nil
}

// readLine returns the next line with its newline, cut at maxLine bytes.
func (s *LineSpout) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) && len(line) < s.maxLine {
			continue
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil
		}
		return line, err
	}
}

// Ack is a no-op: the file needs no commit.
func (s *LineSpout) Ack(topology.MsgID) {}

// Fail is a no-op: the runtime replays the line it kept.
func (s *LineSpout) Fail(topology.MsgID) {}

// Close closes the file.
func (s *LineSpout) Close() error { return s.f.Close() }

// SplitWords splits text into lowercase words: maximal runs of letters and
// digits. The JetStream baseline in package bench uses it too, so both
// count the same words.
func SplitWords(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// SplitBolt emits one record per word of a line.
type SplitBolt struct{}

func (*SplitBolt) Prepare(topology.TaskContext) error { return nil }

func (*SplitBolt) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	line, err := in.String(0)
	if err != nil {
		return err
	}
	for _, w := range SplitWords(line) {
		out.Emit(topology.Values{w})
	}
	return nil
}

func (*SplitBolt) Cleanup() error { return nil }

// CountBolt counts words. Its state is a map; Snapshot and Restore make it
// a stateful bolt for the runtime.
type CountBolt struct {
	sink   *Counts
	counts map[string]int64
}

func (c *CountBolt) Prepare(topology.TaskContext) error {
	c.counts = map[string]int64{}
	return nil
}

func (c *CountBolt) Execute(in *topology.Tuple, _ topology.BasicCollector) error {
	w, err := in.String(0)
	if err != nil {
		return err
	}
	c.counts[w]++
	return nil
}

// Cleanup hands the task's counts to the job's result.
func (c *CountBolt) Cleanup() error {
	c.sink.merge(c.counts)
	return nil
}

// Snapshot encodes the counts as word<TAB>count lines.
func (c *CountBolt) Snapshot() ([]byte, error) {
	var buf bytes.Buffer
	writeCounts(&buf, c.counts)
	return buf.Bytes(), nil
}

// Restore replaces the counts with a snapshot's.
func (c *CountBolt) Restore(snap []byte) error {
	m, err := ReadCounts(bytes.NewReader(snap))
	if err != nil {
		return err
	}
	c.counts = m
	return nil
}

// Counts collects the final counts of every count task.
type Counts struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *Counts) merge(m map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w, n := range m {
		c.m[w] += n
	}
}

// Map returns a copy of the counts.
func (c *Counts) Map() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for w, n := range c.m {
		out[w] = n
	}
	return out
}

// WordCount is one word and its count.
type WordCount struct {
	Word  string
	Count int64
}

// Top returns the n most frequent words, ties broken alphabetically.
func Top(m map[string]int64, n int) []WordCount {
	all := make([]WordCount, 0, len(m))
	for w, c := range m {
		all = append(all, WordCount{w, c})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		return all[i].Word < all[j].Word
	})
	if len(all) > n {
		all = all[:n]
	}
	return all
}

// WriteCounts writes word<TAB>count lines sorted by word.
func WriteCounts(w io.Writer, m map[string]int64) error {
	bw := bufio.NewWriter(w)
	writeCounts(bw, m)
	return bw.Flush()
}

func writeCounts(w io.Writer, m map[string]int64) {
	words := make([]string, 0, len(m))
	for k := range m {
		words = append(words, k)
	}
	sort.Strings(words)
	for _, k := range words {
		fmt.Fprintf(w, "%s\t%d\n", k, m[k])
	}
}

// ReadCounts reads what WriteCounts wrote.
func ReadCounts(r io.Reader) (map[string]int64, error) {
	m := map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		word, count, ok := strings.Cut(sc.Text(), "\t")
		var c int64
		if _, err := fmt.Sscan(count, &c); !ok || err != nil {
			return nil, fmt.Errorf("wordcount: line %d is not word<TAB>count: %q", n, sc.Text())
		}
		m[word] = c
	}
	return m, sc.Err()
}
