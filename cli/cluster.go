package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// The cluster commands: worker runs a worker process; the others operate
// the cluster through its NATS buckets alone, from any machine.

const defaultNATS = "nats://127.0.0.1:4222"

func clusterCommands(topos Topologies) []*cobra.Command {
	return []*cobra.Command{newWorkerCmd(topos), newSubmitCmd(topos), newListCmd(), newStatusCmd(), newRebalanceCmd(topos), newKillCmd(), newLogLevelCmd(), newHealthCmd(), newUICmd()}
}

// conn is a connection to a cluster's buckets.
type conn struct {
	nc       *nats.Conn
	registry *cluster.KVRegistry
	gens     *cluster.KVGenerations
	elector  *cluster.KVElector
	statuses *cluster.KVStatuses
}

// dial connects to the cluster at url for at most d; done closes the
// connection.
func dial(parent context.Context, nf natsFlags, d time.Duration) (ctx context.Context, c *conn, done func(), err error) {
	ctx, cancel := context.WithTimeout(parent, d)
	c, err = openConn(ctx, nf)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, c, func() { c.close(); cancel() }, nil
}

func openConn(ctx context.Context, nf natsFlags) (*conn, error) {
	nc, err := nf.connect("ackflow cli", 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc}
	js, err := jetstream.New(nc)
	// The workers' timing, so that opening the buckets with a TTL leaves
	// it as they set it.
	var timing cluster.MembersConfig
	if err == nil {
		timing, err = cluster.Timing(ctx, js)
	}
	if err == nil {
		c.registry, err = cluster.NewKVRegistry(ctx, js)
	}
	if err == nil {
		c.gens, err = cluster.NewKVGenerations(ctx, js)
	}
	if err == nil {
		c.elector, err = cluster.NewKVElector(ctx, js, timing)
	}
	if err == nil {
		c.statuses, err = cluster.NewKVStatuses(ctx, js, timing)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *conn) close() { c.nc.Close() }

func newWorkerCmd(topos Topologies) *cobra.Command {
	var nf natsFlags
	var name, logLevel, metricsAddr string
	var replicas int
	var mc cluster.MembersConfig
	var statusEvery time.Duration
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker process of a cluster",
		Long: `worker joins the cluster that shares the NATS server at --nats and runs its
part of every submitted topology this binary has. Start one per machine (or
several); tasks spread over the live workers and move when one joins or
dies. Ctrl-C leaves the cluster; the others take the tasks over.`,
		Example: `  ackflow worker --nats nats://127.0.0.1:4222 --name w1
  ackflow worker --name w1 --metrics 0.0.0.0:9464`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level, err := parseLogLevel(logLevel)
			if err != nil {
				return err
			}
			rt := workers.DefaultConfig()
			rt.Logger = workers.NewLogger(cmd.ErrOrStderr(), level)
			if rt.NATSOptions, err = nf.options(); err != nil {
				return err
			}
			if metricsAddr != "" {
				reg, stop, err := serveMetrics(cmd, metricsAddr)
				if err != nil {
					return err
				}
				defer stop()
				rt.Metrics = reg
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			builds := map[string]func(map[string]string) (*topology.Topology, error){}
			for n, b := range topos {
				builds[n] = func(s map[string]string) (*topology.Topology, error) { return b(Settings(s)) }
			}
			prefaultHeap(rt.Logger)
			fmt.Fprintf(cmd.OutOrStdout(), "worker %s joining the cluster at %s with %s (Ctrl-C leaves)\n", orDefault(name, "(host-pid)"), nf.url, strings.Join(topos.Names(), ", "))
			err = workers.RunNode(ctx, workers.NodeConfig{Name: name, NATSURL: nf.url, Topologies: builds, Runtime: rt, Members: mc, StatusEvery: statusEvery, Replicas: replicas})
			if e, ok := refusedBy(nf.url, err); ok {
				return e
			}
			return err
		},
	}
	fl := cmd.Flags()
	nf.register(fl)
	fl.StringVar(&name, "name", "", "this worker's name in the cluster (default: host name and process ID)")
	fl.DurationVar(&mc.HeartbeatEvery, "heartbeat", time.Second, "how often the worker says it is alive")
	fl.DurationVar(&mc.DeadAfter, "dead-after", 3*time.Second, "how long after its last heartbeat a worker is taken for dead (the same on every worker)")
	fl.IntVar(&replicas, "replicas", 0, "copies of the cluster's buckets and checkpoints on the servers of a NATS cluster (e.g. 3; default: 1 for buckets this worker creates)")
	fl.DurationVar(&statusEvery, "status-every", 500*time.Millisecond, "how often the worker reports its tasks (ackflow status shows the reports)")
	logLevelFlag(fl, &logLevel, "info")
	fl.StringVar(&metricsAddr, "metrics", "", metricsFlagHelp)
	return cmd
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newSubmitCmd(topos Topologies) *cobra.Command {
	var nf natsFlags
	var guarantee, parallelism string
	var sets []string
	var every, wait time.Duration
	var resume bool
	var failAfter int
	cmd := &cobra.Command{
		Use:   "submit TOPOLOGY",
		Short: "Submit a topology to the cluster",
		Long: `submit asks the cluster's workers to run TOPOLOGY, which must be compiled
into their binary (and this one, which checks the settings first).

At-least-once and exactly-once take checkpoints in cluster mode (default
every second): a worker's death restarts the topology from the latest one,
or, for at-least-once, moves the dead worker's tasks to another worker when
they hold no state. At-most-once takes none, and at-least-once none with
--checkpoint-every 0: then a dead worker's tasks always move, and those
with state (spouts, keyed bolts) start again without it, a spout from the
beginning of its source; rebalance is refused, and kill does not wait for
the records in flight.`,
		Example: `  ackflow submit wordcount --nats nats://127.0.0.1:4222 --guarantee exactly-once --set input=big.txt --set updates=/shared/out
  ackflow submit wordcount --parallelism split=4,count=3 --resume
  ackflow submit wordcount --guarantee at-least-once --checkpoint-every 0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			settings, err := parseSettings(sets)
			if err != nil {
				return err
			}
			par, err := parseParallelism(parallelism)
			if err != nil {
				return err
			}
			spec := cluster.Spec{Name: name, Guarantee: guarantee, Parallelism: par, Settings: settings, CheckpointEvery: every, Resume: resume,
				NoCheckpoints: cmd.Flags().Changed("checkpoint-every") && every == 0, FailAfter: failAfter}
			if err := checkSpec(topos, spec); err != nil {
				return err
			}
			ctx, c, done, err := dial(cmd.Context(), nf, wait+10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			if err := c.registry.Submit(ctx, spec); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %s (%s)\n", name, guarantee)
			if wait <= 0 {
				return nil
			}
			st, err := waitRunning(ctx, c, name, wait, func(g cluster.Generation) bool { return true })
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	fl := cmd.Flags()
	nf.register(fl)
	fl.StringVar(&guarantee, "guarantee", "at-least-once", "at-most-once, at-least-once or exactly-once")
	fl.StringVar(&parallelism, "parallelism", "", "tasks per component, e.g. split=4,count=2")
	fl.StringArrayVar(&sets, "set", nil, "a setting of the topology, key=value (repeat for more)")
	fl.DurationVar(&every, "checkpoint-every", 0, "checkpoint interval; 0: none (at-least-once) (default 1s, none for at-most-once)")
	fl.BoolVar(&resume, "resume", false, "start from the latest checkpoint of an earlier submission of this topology")
	fl.IntVar(&failAfter, "fail-after", 0, "fail the topology when its tasks fail this many times in a row (0: start it again after every failure, with a growing pause)")
	fl.DurationVar(&wait, "wait", 30*time.Second, "wait this long for the workers to run it and print where its tasks run (0: do not wait)")
	return cmd
}

// checkSpec builds the topology as a worker would, so that bad settings
// or parallelism are refused before anything is submitted.
func checkSpec(topos Topologies, spec cluster.Spec) error {
	build, ok := topos[spec.Name]
	if !ok {
		return fmt.Errorf("this binary has no topology %s; it has %s (the workers run the same binary)", spec.Name, strings.Join(topos.Names(), ", "))
	}
	topo, err := build(spec.Settings)
	if err != nil {
		return fmt.Errorf("%s: %w", spec.Name, err)
	}
	cfg, err := workers.SpecConfig(workers.DefaultConfig(), spec)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	for c := range spec.Parallelism {
		if topo.Component(c) == nil {
			return fmt.Errorf("--parallelism: %s has no component %s", spec.Name, c)
		}
	}
	_, err = workers.Tasks(topo, cfg)
	return err
}

// status is what ackflow status shows.
type status struct {
	Topology   cluster.Spec        `json:"topology"`
	Generation *cluster.Generation `json:"generation,omitempty"`
	Leader     string              `json:"leader,omitempty"`
	Checkpoint uint64              `json:"checkpoint"`
	Tasks      []taskStatus        `json:"tasks"`
	Workers    []workerStatus      `json:"workers"`
}

type taskStatus struct {
	Task      int    `json:"task"`
	Component string `json:"component"`
	Index     int    `json:"index"`
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"` // the fencing epoch: the generation its owner runs
	// Incarnation counts the owners the task's slot had before this one
	// in the generation: a dead worker's stateless tasks move without a
	// new generation (docs/design-notes.md).
	Incarnation uint64 `json:"incarnation,omitempty"`
	State       string `json:"state"` // running, starting, or no report
	Queue       int    `json:"queue"`
	Pending     int64  `json:"pending"`
	Exhausted   bool   `json:"exhausted,omitempty"`
}

type workerStatus struct {
	Name         string `json:"name"`
	Generation   uint64 `json:"generation"`
	Records      int64  `json:"records"`
	FencedFrames int64  `json:"fenced_frames"`
	Error        string `json:"error,omitempty"`
	// Updated is when the worker wrote the report: a worker that died
	// leaves its last one until the statuses bucket expires it.
	Updated time.Time `json:"updated"`
}

func readStatus(ctx context.Context, c *conn, name string) (*status, error) {
	spec, _, err := c.registry.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	// A killed or finished topology names its final checkpoint; a running
	// one's latest comes from its leader's report.
	st := &status{Topology: spec, Checkpoint: spec.LastCheckpoint}
	if g, _, err := c.gens.Current(ctx, name); err == nil && !g.Created.Before(spec.Submitted) {
		st.Generation = &g
	} else if err != nil && !errors.Is(err, cluster.ErrNotFound) {
		return nil, err
	}
	if l, err := c.elector.Leader(ctx, name); err == nil {
		st.Leader = l
	}
	reports, err := c.statuses.List(ctx, name)
	if err != nil {
		return nil, err
	}
	byMember := map[string]workers.Report{}
	for _, cr := range reports {
		rep, err := workers.DecodeReport(cr)
		if err != nil {
			continue
		}
		byMember[rep.Member] = rep
		st.Workers = append(st.Workers, workerStatus{Name: rep.Member, Generation: rep.Generation, Error: rep.Error, Updated: rep.Updated})
		w := &st.Workers[len(st.Workers)-1]
		if rep.Status != nil {
			w.Records, w.FencedFrames = rep.Status.Records, rep.Status.FencedFrames
		}
		if rep.Leader {
			st.Checkpoint = max(st.Checkpoint, rep.Checkpoint)
		}
	}
	if st.Generation == nil {
		return st, nil
	}
	g := st.Generation
	for _, task := range slices.Sorted(maps.Keys(g.Assignment)) {
		owner := g.Owner(g.Assignment[task])
		ts := taskStatus{Task: task, Owner: owner, Epoch: g.Number, Incarnation: g.Moves[g.Assignment[task]].Incarnation, State: "no report"}
		rep, ok := byMember[owner]
		switch {
		case !ok:
		case rep.Generation != g.Number || rep.Status == nil:
			ts.State = "starting"
		default:
			ts.State = "starting"
			if rep.Status.Begun {
				ts.State = "running"
			}
			for _, t := range rep.Status.Tasks {
				if t.Task == task {
					ts.Component, ts.Index, ts.Queue, ts.Pending, ts.Exhausted = t.Component, t.Index, t.Queue, t.Pending, t.Exhausted
				}
			}
		}
		st.Tasks = append(st.Tasks, ts)
	}
	return st, nil
}

// running reports whether every task of the generation runs.
func (st *status) running() bool {
	if st.Generation == nil || len(st.Tasks) == 0 {
		return false
	}
	for _, t := range st.Tasks {
		if t.State != "running" {
			return false
		}
	}
	return true
}

// waitRunning waits until a generation that ok accepts runs every task.
func waitRunning(ctx context.Context, c *conn, name string, wait time.Duration, ok func(cluster.Generation) bool) (*status, error) {
	deadline := time.Now().Add(wait)
	for {
		st, err := readStatus(ctx, c, name)
		if errors.Is(err, cluster.ErrNotFound) && time.Now().Before(deadline) {
			// In a NATS cluster a KV read may come from a replica that
			// has not seen the submission this command just wrote.
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
		if st.Topology.State == cluster.StateFailed {
			return nil, fmt.Errorf("%s failed: %s", name, st.Topology.Error)
		}
		if st.running() && ok(*st.Generation) {
			return st, nil
		}
		if time.Now().After(deadline) {
			why := "no worker has started it: start one with ackflow worker --nats URL"
			if st.Generation != nil {
				why = fmt.Sprintf("generation %d is not running every task yet", st.Generation.Number)
			}
			for _, w := range st.Workers {
				if w.Error != "" {
					why += fmt.Sprintf("; worker %s says: %s", w.Name, w.Error)
				}
			}
			return nil, fmt.Errorf("%s is submitted but not running after %v: %s (ackflow status %s shows more)", name, wait, why, name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func printStatus(w io.Writer, st *status) error {
	sp := st.Topology
	fmt.Fprintf(w, "topology %s: %s, %s", sp.Name, sp.State, sp.Guarantee)
	if st.Leader != "" {
		fmt.Fprintf(w, ", leader %s", st.Leader)
	}
	withoutCheckpoints := sp.NoCheckpoints || sp.Guarantee == workers.AtMostOnce.String()
	switch {
	case withoutCheckpoints:
		fmt.Fprint(w, ", without checkpoints")
	case st.Checkpoint > 0:
		fmt.Fprintf(w, ", checkpoint %d", st.Checkpoint)
	}
	fmt.Fprintln(w)
	if sp.Error != "" {
		fmt.Fprintf(w, "failed: %s\n", sp.Error)
	}
	if g := st.Generation; g != nil {
		fmt.Fprintf(w, "generation %d (%s, %s ago)", g.Number, g.Reason, time.Since(g.Created).Round(time.Second))
		if !withoutCheckpoints {
			fmt.Fprintf(w, ", restored from checkpoint %d", g.RestoreFrom)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "no generation yet: no worker has started it")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(st.Tasks) > 0 {
		fmt.Fprintln(tw, "TASK\tCOMPONENT\tOWNER\tEPOCH\tSTATE\tQUEUE\tPENDING")
		for _, t := range st.Tasks {
			comp := fmt.Sprintf("%s[%d]", t.Component, t.Index)
			if t.Component == "" {
				comp = "-"
			}
			pending := "-"
			if t.Pending > 0 || t.Exhausted {
				pending = fmt.Sprint(t.Pending)
				if t.Exhausted {
					pending += " (source done)"
				}
			}
			epoch := fmt.Sprint(t.Epoch)
			if t.Incarnation > 0 {
				epoch += fmt.Sprintf(".%d", t.Incarnation)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", t.Task, comp, t.Owner, epoch, t.State, t.Queue, pending)
		}
		tw.Flush()
	}
	for _, wk := range st.Workers {
		if wk.Error != "" {
			fmt.Fprintf(w, "worker %s: %s\n", wk.Name, wk.Error)
		}
	}
	return nil
}

func newStatusCmd() *cobra.Command {
	var nf natsFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status TOPOLOGY",
		Short: "Show where a topology's tasks run and how they are doing",
		Long: `status reads the topology's submission, its current generation and the
workers' latest reports from NATS and prints them as aligned tables, or with
--json as one object:

  topology    the submission: name, guarantee, parallelism, settings,
              checkpoint_every_ns, resume, log_level, state (running,
              killing, killed, finished), submitted
  generation  the current generation: number (the fencing epoch), the
              parallelism, assignment (task ID -> worker), restore_from
              (the checkpoint its tasks started from), leader, created,
              reason, fingerprint
  leader      the worker that leads the topology
  checkpoint  the latest complete checkpoint epoch
  tasks       per task: task (ID), component, index, owner, epoch (the
              generation its owner runs), state (running, starting, or
              "no report"), queue (frames waiting), pending (a spout's
              trees in flight), exhausted (a spout whose source is done)
  workers     per worker: name, generation, records, fenced_frames, error`,
		Example: `  ackflow status wordcount
  ackflow status wordcount --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := dial(cmd.Context(), nf, 10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			st, err := readStatus(ctx, c, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	nf.register(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newListCmd() *cobra.Command {
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the submitted topologies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := dial(cmd.Context(), nf, 10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			specs, err := c.registry.List(ctx)
			if errors.Is(err, cluster.ErrInvalidEntry) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", err)
			} else if err != nil {
				return err
			}
			if len(specs) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no topology is submitted (ackflow submit NAME submits one)")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tGUARANTEE\tGENERATION\tWORKERS\tLEADER\tSUBMITTED")
			for _, sp := range specs {
				gen, workersN := "-", "-"
				if g, _, err := c.gens.Current(ctx, sp.Name); err == nil && !g.Created.Before(sp.Submitted) {
					gen = fmt.Sprint(g.Number)
					seen := map[string]bool{}
					for _, m := range g.Assignment {
						seen[g.Owner(m)] = true
					}
					workersN = fmt.Sprint(len(seen))
				}
				leader, err := c.elector.Leader(ctx, sp.Name)
				if err != nil {
					leader = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sp.Name, sp.State, sp.Guarantee, gen, workersN, leader, sp.Submitted.Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	nf.register(cmd.Flags())
	return cmd
}

func newRebalanceCmd(topos Topologies) *cobra.Command {
	var nf natsFlags
	var parallelism string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rebalance TOPOLOGY --parallelism c=N,...",
		Short: "Change the parallelism of a running topology",
		Long: `rebalance changes the number of tasks of components of a running topology.
The leader takes a checkpoint, and the tasks of the new plan restore it:
keyed state moves by key group, so counts stay exact. Spouts, bolts with a
Stateful snapshot and transactional sinks keep their parallelism.`,
		Example: `  ackflow rebalance wordcount --parallelism count=4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			par, err := parseParallelism(parallelism)
			if err != nil {
				return err
			}
			if len(par) == 0 {
				return errors.New("give the new parallelism, e.g. --parallelism count=4")
			}
			ctx, c, done, err := dial(cmd.Context(), nf, wait+10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			spec, rev, err := c.registry.Get(ctx, name)
			if err != nil {
				return err
			}
			if spec.State != cluster.StateRunning {
				return fmt.Errorf("%s is %s; only a running topology can be rebalanced", name, spec.State)
			}
			if cfg, err := workers.SpecConfig(workers.DefaultConfig(), spec); err == nil && cfg.CheckpointEvery == 0 {
				return fmt.Errorf("%s runs without checkpoints, and a rebalance moves the tasks' state through one; kill it and submit it again with the new parallelism", name)
			}
			if spec.Parallelism == nil {
				spec.Parallelism = map[string]int{}
			}
			maps.Copy(spec.Parallelism, par)
			if err := checkSpec(topos, spec); err != nil {
				return err
			}
			if _, err := c.registry.Update(ctx, spec, rev); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rebalancing %s to %s\n", name, parallelism)
			st, err := waitRunning(ctx, c, name, wait, func(g cluster.Generation) bool {
				for comp, n := range par {
					if g.Parallelism[comp] != n {
						return false
					}
				}
				return true
			})
			if err != nil {
				return err
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	nf.register(cmd.Flags())
	cmd.Flags().StringVar(&parallelism, "parallelism", "", "new tasks per component, e.g. count=4")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "wait this long for the new plan to run")
	return cmd
}

func newKillCmd() *cobra.Command {
	var nf natsFlags
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "kill TOPOLOGY",
		Short: "Stop a topology: its spouts stop, what is in flight finishes, its tasks stop",
		Long: `kill stops a topology's spouts, lets every record in flight be processed,
takes a final checkpoint (transactional sinks commit), and stops its tasks.
A later submit --resume continues from that checkpoint. A topology without
checkpoints stops its tasks without waiting for the records in flight
(their Cleanup runs: sinks commit what they hold).`,
		Example: `  ackflow kill wordcount --wait 1m`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			ctx, c, done, err := dial(cmd.Context(), nf, wait+10*time.Second)
			if err != nil {
				return err
			}
			defer done()
			spec, rev, err := c.registry.Get(ctx, name)
			if err != nil {
				return err
			}
			switch spec.State {
			case cluster.StateRunning:
				spec.State = cluster.StateKilling
				if rev, err = c.registry.Update(ctx, spec, rev); err != nil {
					return err
				}
			case cluster.StateKilling:
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s is already %s\n", name, spec.State)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "killing %s\n", name)
			deadline := time.Now().Add(wait)
			for {
				spec, r, err := c.registry.Get(ctx, name)
				if err != nil {
					return err
				}
				// A replica of the bucket that has not caught up yet
				// answers with the submission before the kill.
				if r > rev && spec.State != cluster.StateKilling {
					// The leader writes the final checkpoint's epoch with
					// the state; its status report may not show it yet.
					ck := spec.LastCheckpoint
					if ck == 0 {
						if st, _ := readStatus(ctx, c, name); st != nil {
							ck = st.Checkpoint
						}
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s is %s", name, spec.State)
					if ck > 0 {
						fmt.Fprintf(cmd.OutOrStdout(), "; its last checkpoint is %d", ck)
					}
					fmt.Fprintln(cmd.OutOrStdout())
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s is still being killed after %v: its leader is waiting for records in flight or for a worker (ackflow status %s shows where it stands)", name, wait, name)
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
	}
	nf.register(cmd.Flags())
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "wait this long for the topology to stop")
	return cmd
}
