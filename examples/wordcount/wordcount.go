package wordcount

import (
	"bufio"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
)

// bundledFS holds the text read when no input file is given.
//
//go:embed opticks.txt
var bundledFS embed.FS

const bundledName = "opticks.txt"

// Bundled returns the embedded text read when no input file is given.
func Bundled() []byte { return bundled() }

// bundled reads the text out of bundledFS once. The spout reads bundledFS
// itself; embedding the file a second time as a []byte would put it into
// the binary twice.
var bundled = sync.OnceValue(func() []byte {
	b, err := fs.ReadFile(bundledFS, bundledName)
	if err != nil {
		panic(err) // embedded at build time: cannot be missing
	}
	return b
})

// Config chooses the input and the parallelism of each component.
type Config struct {
	Input string // path of a text file; empty reads the bundled text
	// Parallelism of lines, split and count (0 means 1, 2, 2).
	Lines, Split, Count int
	// LineBytes caps a record's size: a longer line is emitted in pieces of
	// LineBytes, so one record never grows without bound (a word that
	// straddles a cut counts as two). Default 1 MiB (sources.FileConfig.MaxLine).
	LineBytes int
	// LinesPerSec paces the spouts (all tasks together); 0 reads as fast as
	// flow control allows. Benchmarks use it to measure latency at a given
	// load.
	LinesPerSec float64
	// Updates, if set, makes the count bolt emit (word, count) every time
	// it counts a word, into this sink (sinks.NewFile delivers them exactly
	// once under exactly-once).
	Updates func() topology.Bolt
	// Source, if set, is the spout that reads the lines (one field, the
	// line) instead of Input: a JetStream stream, say. It must be
	// topology.Positioned for checkpoints; Lines is its parallelism.
	Source func() topology.Spout
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
	job := &Job{Counts: &Counts{m: map[string]int64{}}}
	b := topology.NewBuilder("wordcount")
	if cfg.Source != nil {
		b.Spout("lines", cfg.Source, cfg.Lines).Outputs("line")
		return job.build(b, cfg)
	}
	input := sources.FileConfig{Path: cfg.Input, MaxLine: cfg.LineBytes, LinesPerSec: cfg.LinesPerSec, Read: &job.readBytes}
	if cfg.Input == "" {
		input.Path, input.FS = bundledName, bundledFS
		job.TotalBytes = int64(len(Bundled()))
	} else {
		st, err := os.Stat(cfg.Input)
		if err != nil {
			return nil, fmt.Errorf("wordcount: cannot read input: %w", err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("wordcount: input %s is a directory; give a text file", cfg.Input)
		}
		job.TotalBytes = st.Size()
	}
	if err := input.Validate(); err != nil {
		return nil, fmt.Errorf("wordcount: %w", err)
	}
	b.Spout("lines", func() topology.Spout { return sources.NewFile(input) }, cfg.Lines).Outputs("line")
	return job.build(b, cfg)
}

// build adds the bolts behind the lines spout. Neither bolt keeps an
// input or its strings past Execute (split's words go on downstream, and
// Counters copy their keys), so both let the runtime reuse their tuples
// and decode their strings in place (ReuseInputs, ZeroCopyInputs).
func (job *Job) build(b *topology.Builder, cfg Config) (*Job, error) {
	b.BasicBolt("split", func() topology.BasicBolt { return &SplitBolt{} }, cfg.Split).ReuseInputs().ZeroCopyInputs().
		Input("lines", topology.Shuffle()).Outputs("word")
	count := b.BasicBolt("count", func() topology.BasicBolt { return &CountBolt{sink: job.Counts, updates: cfg.Updates != nil} }, cfg.Count).ReuseInputs().ZeroCopyInputs().
		Input("split", topology.Fields("word")).KeyedState()
	if cfg.Updates != nil {
		count.Outputs("word", "count")
		b.Bolt("updates", cfg.Updates, cfg.Count).Input("count", topology.Fields("word"))
	}
	topo, err := b.Build()
	if err != nil {
		return nil, err
	}
	job.Topology = topo
	return job, nil
}

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
	// One Values array for the line's words, each record a one-element
	// slice of it (capped, so that nothing appends over the next word),
	// whose values refer to the words' headers (StringValues): an
	// allocation per line instead of one per word.
	vals := topology.StringValues(SplitWords(line))
	for i := range vals {
		out.Emit(vals[i : i+1 : i+1])
	}
	return nil
}

func (*SplitBolt) Cleanup() error { return nil }

// CountBolt counts words in keyed state, which the runtime snapshots at
// checkpoints and restores after failures; the key is the word, the field
// the bolt's input is grouped by, so each word's count lives in the task
// that gets the word. With updates on, it emits (word, count) every time it
// counts a word.
type CountBolt struct {
	sink    *Counts
	updates bool
	counts  *topology.Counters
}

func (c *CountBolt) Prepare(tc topology.TaskContext) error {
	c.counts = tc.State.Counters("counts")
	return nil
}

func (c *CountBolt) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	w, err := in.String(0)
	if err != nil {
		return err
	}
	n := c.counts.Add(w, 1)
	if c.updates {
		return out.Emit(topology.Values{w, n})
	}
	return nil
}

// Cleanup hands the task's counts to the job's result. A task that dies
// never gets here; its state comes back from a checkpoint in the task that
// replaces it.
func (c *CountBolt) Cleanup() error {
	m := make(map[string]int64, c.counts.Len())
	c.counts.Range(func(w string, n int64) bool {
		m[w] = n
		return true
	})
	c.sink.merge(m)
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
