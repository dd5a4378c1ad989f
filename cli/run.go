package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/workers"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

type runFlags struct {
	input, output, guarantee, parallelism, chaos, logLevel       string
	nats                                                         natsFlags
	cpuProfile, deadLetters, checkpointDir, updates, metricsAddr string
	workers, batch, maxPending, ackers, maxAttempts, randomLines int
	events                                                       int
	linger, timeout, checkpointEvery, window                     time.Duration
	rate                                                         float64
	quiet, dedup, resume                                         bool

	// --ui: the status page, and how long it stays after the run.
	uiAddr string
	uiKeep time.Duration
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run JOB",
		Short: "Run a bundled topology in local mode (JOB: wordcount or pageviews)",
		Long: `run executes a bundled topology in local mode: an embedded NATS server and
--workers worker nodes in this process, each with its own NATS
connection, so records really cross NATS. The nodes run cluster mode's
control plane over an in-memory cluster: they elect a leader, which places
the tasks, fails them over when --chaos crashes a node, and ends the run.
The run ends when the input is exhausted and everything in flight is
processed, then prints a summary.`,
		Example: `  ackflow run wordcount
  ackflow run wordcount --input big.txt --output counts.tsv --workers 3
  ackflow run wordcount --parallelism lines=2,split=4,count=2 --guarantee at-least-once
  ackflow run wordcount --guarantee at-least-once --chaos "drop=0.05,dup=0.01,delay=2ms,seed=7"
  ackflow run wordcount --guarantee exactly-once --checkpoint-dir ckpt --updates out --chaos "crash-every=1s"
  ackflow run wordcount --guarantee exactly-once --checkpoint-dir ckpt --updates out --resume
  ackflow run pageviews --guarantee exactly-once --workers 3 --chaos "crash-every=2s" --rate 20000
  ackflow run wordcount --rate 20000 --metrics 127.0.0.1:9464
  ackflow run wordcount --rate 2000 --chaos "drop=0.02,fail=0.01" --ui 127.0.0.1:8080 --ui-keep 5m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runJob(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "text file to read (default: the bundled text, Newton's Opticks)")
	fl.IntVar(&f.randomLines, "random-lines", 0, "read this many lines of random text (seed 1) instead, and check the counts against the generator's")
	fl.StringVar(&f.output, "output", "", "write word<TAB>count lines sorted by word to this file")
	fl.StringVar(&f.updates, "updates", "", "write every count update (word<TAB>count) through the two-phase-commit file sink into this directory: exactly once with --guarantee exactly-once")
	fl.IntVar(&f.workers, "workers", 2, "logical workers, each with its own NATS connection")
	fl.StringVar(&f.parallelism, "parallelism", "", "tasks per component, e.g. lines=1,split=4,count=2")
	fl.StringVar(&f.guarantee, "guarantee", "at-least-once", "at-most-once, at-least-once or exactly-once")
	fl.StringVar(&f.chaos, "chaos", "", `inject failures, e.g. "drop=0.05,dup=0.01,reorder=0.1,delay=2ms,crash-every=3s,seed=7"`)
	f.nats.registerURL(fl, "", "use this NATS server instead of an embedded one")
	// The runtime's defaults, so that a value given, 0 too, reaches the
	// config's validation instead of standing for the default.
	def := workers.DefaultConfig()
	fl.IntVar(&f.batch, "batch", def.BatchSize, "records per frame")
	fl.DurationVar(&f.linger, "linger", def.Linger, "longest wait for a partial batch")
	fl.IntVar(&f.maxPending, "max-pending", def.MaxSpoutPending, "most trees in flight per spout task; a spout below capacity keeps an eighth of it")
	fl.IntVar(&f.ackers, "ackers", def.Ackers, "acker tasks")
	fl.DurationVar(&f.timeout, "message-timeout", def.MessageTimeout, "fail and replay a tree not completed in this long")
	fl.Float64Var(&f.rate, "rate", 0, "lines (wordcount) or events (pageviews) per second read by the spouts (default, or inf: as fast as flow control allows)")
	fl.IntVar(&f.events, "events", 100000, "pageviews: how many page views to generate")
	fl.DurationVar(&f.window, "window", 10*time.Second, "pageviews: the length of a window in event time")
	fl.IntVar(&f.maxAttempts, "max-attempts", 10, "failed attempts of a record before it goes to the dead letters (0: replay forever)")
	fl.StringVar(&f.deadLetters, "dead-letters", "", `where records given up on go: a JSON-lines file (default JOB-dead-letters.jsonl, created only if needed) or "nats" for the JetStream stream ackflow_JOB_dlq`)
	logLevelFlag(fl, &f.logLevel, "warn")
	fl.BoolVar(&f.quiet, "quiet", false, "no progress line")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (read it with go tool pprof)")
	fl.StringVar(&f.metricsAddr, "metrics", "", metricsFlagHelp)
	fl.StringVar(&f.uiAddr, "ui", "", "serve the status page on http://ADDR/ while the run goes on, with its /metrics, e.g. 127.0.0.1:8080")
	fl.DurationVar(&f.uiKeep, "ui-keep", 0, "with --ui: keep serving the page this long after the run ends, to read its final figures (Ctrl-C stops sooner)")
	fl.BoolVar(&f.dedup, "dedup", true, "drop replayed duplicates in stateful bolts (at-least-once)")
	fl.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "take a checkpoint this often (default: 1s with exactly-once, none otherwise)")
	fl.StringVar(&f.checkpointDir, "checkpoint-dir", "", "keep checkpoints in this directory, so that --resume can continue a stopped run (default: in memory)")
	fl.BoolVar(&f.resume, "resume", false, "start from the latest checkpoint in --checkpoint-dir")
	return cmd
}

func runJob(cmd *cobra.Command, name string, f runFlags) error {
	if name != "wordcount" && name != "pageviews" {
		return fmt.Errorf("unknown job %q; the bundled jobs are: wordcount, pageviews", name)
	}
	cfg, letters, err := runtimeConfig(name, f)
	if err != nil {
		return err
	}
	if letters != nil {
		defer letters.Close()
	}
	if f.metricsAddr != "" {
		reg, stop, err := serveMetrics(cmd, f.metricsAddr)
		if err != nil {
			return err
		}
		defer stop()
		cfg.Metrics = reg
	}
	if f.uiKeep > 0 && f.uiAddr == "" {
		return errors.New("--ui-keep keeps the status page of --ui; give --ui ADDR too")
	}
	if f.uiAddr != "" {
		page, err := startRunUI(cmd, f, &cfg, letters)
		if err != nil {
			return err
		}
		defer page.close(cmd)
	}
	switch {
	case math.IsNaN(f.rate) || f.rate < 0:
		return fmt.Errorf("--rate %v: give records per second, 0 or inf for no limit", f.rate)
	case math.IsInf(f.rate, 1):
		f.rate = 0
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
	if name == "pageviews" {
		return runPageviews(cmd, f, cfg, letters)
	}
	return runWordCount(cmd, f, cfg, letters)
}

// runtimeConfig turns the flags every job shares into the runtime's
// config, and opens the dead-letter file.
func runtimeConfig(name string, f runFlags) (workers.Config, *deadletter.File, error) {
	cfg := workers.DefaultConfig()
	var err error
	if cfg.Guarantee, err = workers.ParseGuarantee(f.guarantee); err != nil {
		return cfg, nil, err
	}
	if cfg.Chaos, err = chaos.Parse(f.chaos); err != nil {
		return cfg, nil, err
	}
	if cfg.Parallelism, err = parseParallelism(f.parallelism); err != nil {
		return cfg, nil, err
	}
	cfg.Workers = f.workers
	cfg.NoDedup = !f.dedup
	cfg.MaxAttempts = f.maxAttempts
	cfg.CheckpointEvery, cfg.Resume = f.checkpointEvery, f.resume
	if f.resume && f.checkpointDir == "" {
		return cfg, nil, errors.New("--resume needs the --checkpoint-dir of the run to continue")
	}
	if f.checkpointDir != "" {
		if !f.resume {
			if err := os.MkdirAll(f.checkpointDir, 0o755); err != nil {
				return cfg, nil, fmt.Errorf("cannot create the checkpoint directory: %w; give --checkpoint-dir a directory this user can create and write", err)
			}
		}
		if cfg.Checkpoints, err = checkpoint.NewDir(f.checkpointDir); err != nil {
			return cfg, nil, err
		}
	}
	cfg.NATSURL = f.nats.url
	if cfg.NATSOptions, err = f.nats.options(); err != nil {
		return cfg, nil, err
	}
	cfg.BatchSize, cfg.MaxSpoutPending, cfg.Ackers = f.batch, f.maxPending, f.ackers
	cfg.Linger, cfg.MessageTimeout = f.linger, f.timeout
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Logger = workers.DefaultLogger(level)
	var letters *deadletter.File
	switch f.deadLetters {
	case "nats":
		cfg.DeadLetterStream = true
	case "":
		letters = deadletter.NewFile(name + "-dead-letters.jsonl")
	default:
		if st, err := os.Stat(filepath.Dir(f.deadLetters)); err != nil || !st.IsDir() {
			return cfg, nil, fmt.Errorf("--dead-letters %s: the directory %s does not exist; create it or give another path", f.deadLetters, filepath.Dir(f.deadLetters))
		}
		letters = deadletter.NewFile(f.deadLetters)
	}
	if letters != nil {
		cfg.DeadLetters = letters
	}
	return cfg, letters, cfg.Validate()
}

// runWordCount runs the bundled word count.
func runWordCount(cmd *cobra.Command, f runFlags, cfg workers.Config, letters *deadletter.File) error {
	var err error
	var oracle map[string]int64
	if f.randomLines > 0 {
		if f.input != "" {
			return errors.New("give --input or --random-lines, not both")
		}
		if f.input, oracle, err = writeRandomText(f.randomLines); err != nil {
			return err
		}
		defer os.Remove(f.input)
	}
	wc := wordcount.Config{Input: f.input, LinesPerSec: f.rate}
	if f.updates != "" {
		if st, err := os.Stat(f.updates); err != nil || !st.IsDir() {
			return fmt.Errorf("--updates %s: not a directory; create it first", f.updates)
		}
		wc.Updates = sinks.NewFile(sinks.FileConfig{Dir: f.updates, Name: "updates"})
	}
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
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	interrupted := err != nil && sum != nil && ctx.Err() != nil && cmd.Context().Err() == nil
	if e, ok := refusedBy(cfg.NATSURL, err); ok {
		return e
	}
	if err != nil && !interrupted {
		return err
	}
	counts := job.Counts.Map()
	w := cmd.OutOrStdout()
	if interrupted {
		fmt.Fprintln(w, "interrupted: the counts and figures below cover what was processed before the signal")
	}
	printTop(w, counts)
	printSummary(w, sum)
	printDeadLetters(w, sum, letters)
	if oracle != nil && !interrupted {
		if err := checkCounts(w, counts, oracle, sum, !cfg.NoDedup); err != nil {
			return err
		}
	}
	if interrupted {
		if out != nil {
			out.Close()
			removeOutput(f.output)
		}
		return errors.New("interrupted before the input was processed; no output file was written")
	}
	if out != nil {
		err := wordcount.WriteCounts(out, counts)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// A half-written file must not pass for the counts.
			removeOutput(f.output)
			return outputFailed(f.output, err)
		}
		fmt.Fprintf(w, "\nwrote %d words to %s\n", len(counts), f.output)
	}
	return nil
}

// removeOutput removes a counts file the run did not finish; only a
// regular file: --output may name a device or a pipe (/dev/stdout).
func removeOutput(path string) {
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() {
		os.Remove(path)
	}
}

// outputFailed says why the counts were not written, and what to do.
func outputFailed(path string, err error) error {
	what := "check the path and its permissions"
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		what = "the disk is full: free space or give --output a file on another disk"
	}
	return fmt.Errorf("the run finished but its counts could not be written to %s (%w): %s, then run again", path, err, what)
}

// writeRandomText writes n random lines to a temporary file.
func writeRandomText(n int) (string, map[string]int64, error) {
	f, err := os.CreateTemp("", "ackflow-random-*.txt")
	if err != nil {
		return "", nil, fmt.Errorf("cannot write the random input: %w", err)
	}
	defer f.Close()
	oracle, err := wordcount.RandomText(f, n, 1)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("cannot write the random input: %w", err)
	}
	return f.Name(), oracle, nil
}

// checkCounts compares the counts with the generator's against what the
// run's guarantee promises, and says so.
func checkCounts(w io.Writer, got, want map[string]int64, s *workers.Summary, dedup bool) error {
	var missing, extra int64
	for word, n := range want {
		if got[word] < n {
			missing += n - got[word]
		} else {
			extra += got[word] - n
		}
	}
	for word, n := range got {
		if _, ok := want[word]; !ok {
			extra += n
		}
	}
	fmt.Fprintf(w, "counts against the generator's: %d occurrences missing, %d counted more than once\n", missing, extra)
	var suspects int64
	for _, c := range s.Components {
		suspects += c.Suspects
	}
	switch {
	case missing > 0 && s.Guarantee != workers.AtMostOnce && s.DeadLettered == 0:
		return fmt.Errorf("%s lost %d occurrences: this is a bug, please report it with the command line", s.Guarantee, missing)
	case extra > 0 && (s.Guarantee == workers.AtMostOnce || dedup && suspects == 0):
		return fmt.Errorf("%s counted %d occurrences twice: this is a bug, please report it with the command line", s.Guarantee, extra)
	}
	return nil
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
	fmt.Fprintf(w, "NATS: %d messages, %.1f MiB out (%d records crossed NATS, %d stayed inside a worker); %d acker messages, %d acks rode on records\n",
		s.NATSMessagesOut, float64(s.NATSBytesOut)/(1<<20), s.NATSRecordsOut, s.LocalRecords, s.AckMessages, s.AckRides)
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
	// What became of dropped records: replayed, except at most once.
	failed, timedOut := "their trees were failed and replayed", "their trees timed out"
	if s.Guarantee == workers.AtMostOnce {
		failed = "at-most-once does not replay them"
		timedOut = failed
	}
	if s.BadFrames+s.FencedRecords+s.PublishErrors > 0 {
		fmt.Fprintf(w, "dropped: %d bad frames, %d fenced records, %d frames that could not be sent (%s)\n",
			s.BadFrames, s.FencedRecords, s.PublishErrors, failed)
	}
	if s.NACKs+s.Resent+s.LostFrames > 0 {
		fmt.Fprintf(w, "lost frames: %d NACKs sent, %d frames resent, %d no longer kept, %d given up on (%s)\n",
			s.NACKs, s.Resent, s.ResendMisses, s.LostFrames, timedOut)
	}
	if c := s.Chaos; c.FramesDropped+c.FramesDuplicated+c.FramesDelayed+c.FramesReordered+c.InputsFailed > 0 || s.Crashes > 0 {
		fmt.Fprintf(w, "chaos: %d frames dropped (%d records), %d duplicated, %d delayed, %d reordered, %d inputs failed, %d worker crashes\n",
			c.FramesDropped, c.RecordsDropped, c.FramesDuplicated, c.FramesDelayed, c.FramesReordered, c.InputsFailed, s.Crashes)
	}
	if c := s.Checkpoints; c.Taken+c.Abandoned > 0 || c.RestoredFrom > 0 {
		fmt.Fprintf(w, "checkpoints: %d taken, %d abandoned; spouts paused %v (p50) to %v (max); the latest, epoch %d, holds %s",
			c.Taken, c.Abandoned, c.PauseP50.Round(time.Microsecond), c.PauseMax.Round(time.Microsecond), c.Latest, size(c.Bytes))
		if c.RestoredFrom > 0 {
			fmt.Fprintf(w, "; resumed from epoch %d", c.RestoredFrom)
		}
		if c.Rollbacks > 0 {
			fmt.Fprintf(w, "; %d rollbacks after a worker with state died", c.Rollbacks)
		}
		fmt.Fprintln(w)
	}
	if len(s.Recoveries) > 0 {
		parts := make([]string, len(s.Recoveries))
		for i, d := range s.Recoveries {
			parts[i] = d.Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "recovery after each crash (until every tree its failovers replayed completed): %s\n", strings.Join(parts, ", "))
	}
	replay := "; their trees were replayed)"
	if s.Guarantee == workers.AtMostOnce {
		replay = "; at-most-once does not replay them)"
	}
	if s.Unaccounted > 0 {
		fmt.Fprintf(w, "%d records were sent but never processed (lost in transit or in a crashed worker%s\n", s.Unaccounted, replay)
	}
	if s.Discarded > 0 {
		fmt.Fprintf(w, "%d records were dropped unprocessed (queued for or emitted by tasks that stopped or crashed, or their frames could not be sent%s\n", s.Discarded, replay)
	}
}

// printDeadLetters says how many records were given up on, where they are,
// and the first few with their errors.
func printDeadLetters(w io.Writer, s *workers.Summary, file *deadletter.File) {
	if s.DeadLettered == 0 && s.DeadLetterErrors == 0 {
		return
	}
	where := "in memory"
	switch {
	case file != nil:
		where = "in " + file.Path()
	case s.DeadLetterStream != "":
		where = "in the JetStream stream " + s.DeadLetterStream
	}
	fmt.Fprintf(w, "\n%d records failed too often and went to the dead letters (%s):\n", s.DeadLettered, where)
	letters := s.DeadLetters
	if file != nil {
		letters, _ = deadletter.ReadFile(file.Path())
	}
	for i, l := range letters {
		if i == 5 {
			fmt.Fprintf(w, "  ... and %d more\n", len(letters)-i)
			break
		}
		fmt.Fprintf(w, "  %s offset %d after %d attempts: %s\n", l.Spout, l.Offset, l.Attempts, l.Error)
	}
	if s.DeadLetterErrors > 0 {
		fmt.Fprintf(w, "%d writes to the dead letters failed and were retried\n", s.DeadLetterErrors)
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
	p.bar.Describe(progressLine(pr))
	p.bar.Set64(p.read())
}

// progressLine is what the progress bar says of a run: its rate, the
// trees in flight, and what went wrong so far, when something did.
func progressLine(pr workers.Progress) string {
	line := fmt.Sprintf("%.0f records/s, %d trees in flight", pr.RecordsPerSec, pr.Pending)
	if pr.Replayed > 0 {
		line += fmt.Sprintf(", %d replayed", pr.Replayed)
	}
	if pr.DeadLettered > 0 {
		line += fmt.Sprintf(", %d dead letters", pr.DeadLettered)
	}
	return line
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(os.Stderr)
	}
}
