package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterRow runs the word count on three worker processes of the ackflow
// binary and the suite's NATS server (cluster mode, at-least-once with its
// checkpoints every second), writing every count update through the file
// sink. The rate is the records the run must emit (lines, words and
// updates) over the time from the submission to the workers' status
// reports counting the last of them: it includes starting the generation's
// tasks, which the local rows do not. (Timed from the first record a
// report counted instead, a quick run over between two of the reports,
// then 100 ms apart, had no time at all and printed 2.5*10^12 records/s.)
// The sink's final count of every word is checked against the oracle.
func (s *suite) clusterRow(ctx context.Context) error {
	if s.cfg.WorkerBinary == "" {
		s.rep.Unavailable = append(s.rep.Unavailable, "cluster-3-processes: needs the ackflow binary to start workers (run ackflow bench)")
		return nil
	}
	updates := filepath.Join(s.dir, "cluster-updates")
	if err := os.Mkdir(updates, 0o755); err != nil {
		return err
	}
	nc, err := nats.Connect(s.url, nats.Name("ackflow bench"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	reg, err := cluster.NewKVRegistry(ctx, js)
	if err != nil {
		return err
	}
	timing := cluster.DefaultMembersConfig()
	members, err := cluster.NewKVMembers(ctx, js, timing)
	if err != nil {
		return err
	}
	statuses, err := cluster.NewKVStatuses(ctx, js, timing)
	if err != nil {
		return err
	}
	stop, err := s.startWorkers(ctx, 3)
	if err != nil {
		return err
	}
	defer stop()
	if err := waitFor(ctx, 30*time.Second, 100*time.Millisecond, "three workers joining", func() (bool, error) {
		ms, err := members.List(ctx)
		return len(ms) == 3, err
	}); err != nil {
		return err
	}
	var words int64
	for _, n := range s.oracle {
		words += n
	}
	want := int64(s.lines) + 2*words // lines, words, count updates
	first := time.Now()
	if err := reg.Submit(ctx, cluster.Spec{Name: "wordcount", Guarantee: "at-least-once", Settings: map[string]string{"input": s.input, "updates": updates}}); err != nil {
		return err
	}
	var last time.Time
	if err := waitFor(ctx, 10*time.Minute, clusterTick, "the cluster word count", func() (bool, error) {
		n, err := clusterRecords(ctx, statuses)
		if err != nil {
			return false, err
		}
		if n >= want && last.IsZero() {
			last = time.Now()
		}
		spec, _, err := reg.Get(ctx, "wordcount")
		return err == nil && spec.State == cluster.StateFinished && !last.IsZero(), err
	}); err != nil {
		return err
	}
	lostWords, err := updatesLost(updates, s.oracle)
	if err != nil {
		return err
	}
	secs := last.Sub(first).Seconds()
	row := Row{Name: "cluster-3-processes", RecordsPerSec: float64(want) / secs, Records: want, Seconds: secs, Lost: lostWords,
		Note: "at-least-once, 3 worker processes, 1 s checkpoints, every count update to the file sink; timed from the submission to the status report (every 20 ms) with the last record"}
	s.relate(&row)
	s.rep.Rows = append(s.rep.Rows, row)
	s.logf("cluster, 3 processes: %.0f records/s", row.RecordsPerSec)
	if lostWords > 0 {
		return fmt.Errorf("bench: the cluster word count lost %d words", lostWords)
	}
	return nil
}

// startWorkers starts n worker processes on the suite's server; stop
// ends them.
func (s *suite) startWorkers(ctx context.Context, n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Signal(os.Interrupt)
		}
		for _, c := range cmds {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
	}
	for i := 1; i <= n; i++ {
		log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("worker-%d.log", i)))
		if err != nil {
			stop()
			return nil, err
		}
		c := exec.CommandContext(ctx, s.cfg.WorkerBinary, "worker", "--nats", s.url, "--name", fmt.Sprintf("bench-w%d", i), "--log-level", "warn", "--status-every", clusterTick.String())
		c.Stdout, c.Stderr = log, log
		if err := c.Start(); err != nil {
			log.Close()
			stop()
			return nil, fmt.Errorf("bench: starting a worker: %w", err)
		}
		log.Close() // the child has its own descriptor
		cmds = append(cmds, c)
	}
	return stop, nil
}

// clusterRecords sums the records the workers report for the word count's
// current generation.
func clusterRecords(ctx context.Context, statuses cluster.Statuses) (int64, error) {
	reports, err := statuses.List(ctx, "wordcount")
	if err != nil {
		return 0, err
	}
	var gen uint64
	var reps []workers.Report
	for _, cr := range reports {
		rep, err := workers.DecodeReport(cr)
		if err != nil || rep.Status == nil {
			continue
		}
		gen = max(gen, rep.Generation)
		reps = append(reps, rep)
	}
	var n int64
	for _, r := range reps {
		if r.Generation == gen {
			n += r.Status.Records
		}
	}
	return n, nil
}

// updatesLost counts the words whose final count in the sink (the
// largest update) differs from the oracle's.
func updatesLost(dir string, oracle map[string]int64) (int64, error) {
	lines, err := sinks.Lines(dir, "updates")
	if err != nil {
		return 0, err
	}
	final := map[string]int64{}
	for _, l := range lines {
		w, c, ok := strings.Cut(strings.TrimSuffix(l, "\n"), "\t")
		n, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("bench: bad update line %q", l)
		}
		final[w] = max(final[w], n)
	}
	return lost(final, oracle), nil
}

// clusterTick is how often the cluster row's workers report and the row
// reads the reports: the end of its run is known to about twice that.
const clusterTick = 20 * time.Millisecond

// waitFor polls done every tick until it says so, fails, or d passes.
func waitFor(ctx context.Context, d, tick time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := done()
		if err != nil && !errors.Is(err, cluster.ErrNotFound) {
			return fmt.Errorf("bench: %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s: not done after %v", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tick):
		}
	}
}
