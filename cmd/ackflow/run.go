package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

type runFlags struct {
	input, output, guarantee, parallelism, chaos, natsURL, logLevel string
	cpuProfile                                                      string
	workers, batch, maxPending, ackers                              int
	linger, timeout                                                 time.Duration
	rate                                                            float64
	quiet, dedup                                                    bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run JOB",
		Short: "Run a bundled topology in local mode (JOB: wordcount)",
		Long: `run executes a bundled topology in local mode: an embedded NATS server and
--workers logical workers in this process, each with its own NATS
connection, so records really cross NATS. The run ends when the input is
exhausted and everything in flight is processed, then prints a summary.`,
		Example: `  ackflow run wordcount
  ackflow run wordcount --input big.txt --output counts.tsv --workers 3
  ackflow run wordcount --parallelism lines=2,split=4,count=2 --guarantee at-least-once
  ackflow run wordcount --guarantee at-least-once --chaos "drop=0.05,dup=0.01,delay=2ms,seed=7"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runJob(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "text file to read (default: the bundled text, Newton's Opticks)")
	fl.StringVar(&f.output, "output", "", "write word<TAB>count lines sorted by word to this file")
	fl.IntVar(&f.workers, "workers", 2, "logical workers, each with its own NATS connection")
	fl.StringVar(&f.parallelism, "parallelism", "", "tasks per component, e.g. lines=1,split=4,count=2")
	fl.StringVar(&f.guarantee, "guarantee", "at-most-once", "at-most-once, at-least-once or exactly-once")
	fl.StringVar(&f.chaos, "chaos", "", `inject failures, e.g. "drop=0.05,dup=0.01,reorder=0.1,delay=2ms,crash-every=3s,seed=7"`)
	fl.StringVar(&f.natsURL, "nats", "", "use this NATS server instead of an embedded one")
	fl.IntVar(&f.batch, "batch", 0, "records per frame (default 512)")
	fl.DurationVar(&f.linger, "linger", 0, "longest wait for a partial batch (default 2ms)")
	fl.IntVar(&f.maxPending, "max-pending", 0, "trees in flight per spout task (default 4096)")
	fl.IntVar(&f.ackers, "ackers", 0, "acker tasks (default 1)")
	fl.DurationVar(&f.timeout, "message-timeout", 0, "fail and replay a tree not completed in this long (default 30s)")
	fl.Float64Var(&f.rate, "rate", 0, "lines per second read by the spouts (default: as fast as flow control allows)")
	fl.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress line")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (read it with go tool pprof)")
	fl.BoolVar(&f.dedup, "dedup", true, "drop replayed duplicates in stateful bolts (at-least-once)")
	return cmd
}

func runJob(cmd *cobra.Command, name string, f runFlags) error {
	if name != "wordcount" {
		return fmt.Errorf("unknown job %q; the bundled jobs are: wordcount", name)
	}
	cfg := workers.DefaultConfig()
	var err error
	if cfg.Guarantee, err = workers.ParseGuarantee(f.guarantee); err != nil {
		return err
	}
	if cfg.Chaos, err = chaos.Parse(f.chaos); err != nil {
		return err
	}
	if cfg.Parallelism, err = parseParallelism(f.parallelism); err != nil {
		return err
	}
	cfg.Workers = f.workers
	cfg.NoDedup = !f.dedup
	cfg.NATSURL = f.natsURL
	setIf(&cfg.BatchSize, f.batch)
	setIf(&cfg.MaxSpoutPending, f.maxPending)
	setIf(&cfg.Ackers, f.ackers)
	setIf(&cfg.Linger, f.linger)
	setIf(&cfg.MessageTimeout, f.timeout)
	level, err := zerolog.ParseLevel(f.logLevel)
	if err != nil {
		return fmt.Errorf("bad --log-level %q: use debug, info, warn or error", f.logLevel)
	}
	cfg.Logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).Level(level).With().Timestamp().Logger()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if f.rate < 0 {
		return fmt.Errorf("--rate %v must not be negative", f.rate)
	}
	wc := wordcount.Config{Input: f.input, LinesPerSec: f.rate}
	job, err := wordcount.New(wc)
	if err != nil {
		return err
	}
	// Catch a bad output path before spending the run on it.
	var out *os.File
	if f.output != "" {
		if out, err = os.Create(f.output); err != nil {
			return fmt.Errorf("cannot write the output: %w", err)
		}
		defer out.Close()
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !f.quiet && term.IsTerminal(int(os.Stderr.Fd())) {
		p := newProgress(job.TotalBytes, job.ReadBytes)
		defer p.finish()
		cfg.Progress = p.update
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("cannot write the CPU profile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		return err
	}
	counts := job.Counts.Map()
	w := cmd.OutOrStdout()
	printTop(w, counts)
	printSummary(w, sum)
	if out != nil {
		if err := wordcount.WriteCounts(out, counts); err != nil {
			return fmt.Errorf("writing %s: %w", f.output, err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", f.output, err)
		}
		fmt.Fprintf(w, "\nwrote %d words to %s\n", len(counts), f.output)
	}
	return nil
}

func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

// parseParallelism reads "split=4,count=2".
func parseParallelism(s string) (map[string]int, error) {
	m := map[string]int{}
	if s == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || k == "" {
			return nil, fmt.Errorf("bad --parallelism entry %q: want component=N, e.g. split=4", kv)
		}
		m[k] = n
	}
	return m, nil
}

func printTop(w io.Writer, counts map[string]int64) {
	fmt.Fprintln(w, "top words:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for i, wc := range wordcount.Top(counts, 10) {
		fmt.Fprintf(tw, "%d.\t%s\t%d\t\n", i+1, wc.Word, wc.Count)
	}
	tw.Flush()
}

func printSummary(w io.Writer, s *workers.Summary) {
	fmt.Fprintf(w, "\n%s, %s, %d workers: %d source records, %d records in %v (%.0f records/s)\n",
		s.Topology, s.Guarantee, s.Workers, s.SourceRecords, s.Records, s.Duration.Round(time.Millisecond), s.RecordsPerSec)
	fmt.Fprintf(w, "NATS: %d messages, %.1f MiB out (%d records crossed NATS, %d stayed inside a worker); %d acker messages\n",
		s.NATSMessagesOut, float64(s.NATSBytesOut)/(1<<20), s.NATSRecordsOut, s.LocalRecords, s.AckMessages)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "component\ttasks\temitted\texecuted\tacked\tfailed\treplayed\ttimed out\tlatency p50/p99")
	for _, c := range s.Components {
		lat := "-"
		if c.Spout && c.LatencyP50 > 0 {
			lat = fmt.Sprintf("%v / %v", c.LatencyP50.Round(time.Microsecond), c.LatencyP99.Round(time.Microsecond))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", c.Name, c.Tasks, c.Emitted, c.Executed, c.Acked, c.Failed, c.Replayed, c.TimedOut, lat)
	}
	tw.Flush()
	for _, c := range s.Components {
		if c.DuplicatesDropped+c.Suspects+c.ReEmitted+c.LogPeakEntries > 0 {
			fmt.Fprintf(w, "dedup in %s: %d duplicates dropped, %d outputs re-emitted, %d Bloom suspects processed; log peak %d entries (%.1f KiB), %d left; Bloom fill %.3f, est. false positives %.2g\n",
				c.Name, c.DuplicatesDropped, c.ReEmitted, c.Suspects, c.LogPeakEntries, float64(c.LogPeakBytes)/1024, s.LogEntries, c.BloomFill, c.BloomFPRate)
		}
	}
	if s.DuplicateFrames > 0 {
		fmt.Fprintf(w, "%d frames delivered twice were dropped\n", s.DuplicateFrames)
	}
	if s.BadFrames+s.FencedRecords+s.CtrlDropped+s.PublishErrors > 0 {
		fmt.Fprintf(w, "dropped: %d bad frames, %d fenced records, %d control frames on full inboxes, %d publish errors\n",
			s.BadFrames, s.FencedRecords, s.CtrlDropped, s.PublishErrors)
	}
	if c := s.Chaos; c.FramesDropped+c.FramesDuplicated+c.FramesDelayed+c.FramesReordered > 0 || s.Crashes > 0 {
		fmt.Fprintf(w, "chaos: %d frames dropped (%d records), %d duplicated, %d delayed, %d reordered, %d worker crashes\n",
			c.FramesDropped, c.RecordsDropped, c.FramesDuplicated, c.FramesDelayed, c.FramesReordered, s.Crashes)
	}
	if len(s.Recoveries) > 0 {
		parts := make([]string, len(s.Recoveries))
		for i, d := range s.Recoveries {
			parts[i] = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "recovery after each crash (until every tree in flight completed): %s\n", strings.Join(parts, ", "))
	}
	if s.Unaccounted > 0 {
		fmt.Fprintf(w, "%d records were sent but never processed (lost in transit or in a crashed worker", s.Unaccounted)
		if s.Guarantee == workers.AtMostOnce {
			fmt.Fprintln(w, "; at-most-once does not replay them)")
		} else {
			fmt.Fprintln(w, "; their trees were replayed)")
		}
	}
}

// progress draws a bar of input bytes read, with live rates, on stderr.
// It appears only when a run lasts more than a second.
type progress struct {
	mu      sync.Mutex
	bar     *progressbar.ProgressBar
	total   int64
	read    func() int64
	started time.Time
}

func newProgress(total int64, read func() int64) *progress {
	return &progress{total: total, read: read, started: time.Now()}
}

func (p *progress) update(pr workers.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		if pr.Elapsed < time.Second {
			return
		}
		p.bar = progressbar.NewOptions64(p.total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionShowBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(200*time.Millisecond),
		)
	}
	p.bar.Describe(fmt.Sprintf("%.0f records/s, %d trees in flight", pr.RecordsPerSec, pr.Pending))
	p.bar.Set64(p.read())
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}
