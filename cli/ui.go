package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/metrics"
	"github.com/ackflow/ackflow/ui"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// runUI is the status page of a local run (run --ui).
type runUI struct {
	srv  *ui.Server
	keep time.Duration
	// interrupted ends with a signal to the process: then the page does
	// not stay after the run.
	interrupted context.Context
	stopSignals func()
}

// startRunUI serves the status page of the run cfg configures, with its
// /metrics, on --ui's address. It gives the run a metrics registry (the
// one of --metrics if there is one) and a view of its workers and tasks.
func startRunUI(cmd *cobra.Command, f runFlags, cfg *workers.Config, letters *deadletter.File) (*runUI, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewRegistry()
	}
	cfg.View = workers.NewLocalView()
	src := &ui.Local{Metrics: cfg.Metrics.Prometheus(), View: cfg.View}
	switch {
	case letters != nil:
		src.DeadLetters = letters.Path()
	case cfg.DeadLetterStream:
		src.DeadLetters = "the JetStream stream of the run's NATS server"
	}
	srv, err := ui.Listen(f.uiAddr, ui.Config{Source: src, Metrics: cfg.Metrics.Handler()})
	if err != nil {
		return nil, fmt.Errorf("--ui: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "serving the status page on %s (metrics on %smetrics)\n", srv.URL(), srv.URL())
	u := &runUI{srv: srv, keep: f.uiKeep}
	u.interrupted, u.stopSignals = signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	return u, nil
}

// close keeps the page up for --ui-keep after the run, unless the run was
// interrupted, then stops it.
func (u *runUI) close(cmd *cobra.Command) {
	defer u.stopSignals()
	if u.keep > 0 && u.interrupted.Err() == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "the run ended; the status page stays on %s for %v (Ctrl-C stops it)\n", u.srv.URL(), u.keep)
		t := time.NewTimer(u.keep)
		select {
		case <-t.C:
		case <-u.interrupted.Done():
		}
		t.Stop()
	}
	u.srv.Close()
}

func newUICmd() *cobra.Command {
	var nf natsFlags
	var addr string
	var refresh time.Duration
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the cluster's status page: topologies, components, tasks, workers",
		Long: `ui serves a status page of the cluster that shares the NATS server at
--nats, in the spirit of Storm UI: every submitted topology with its
figures per component (emitted, acked, failed, replayed, complete latency,
capacity, duplicates dropped, dead letters, pending trees), what explains
a slow or replaying topology, every task with its owner and fencing
epoch, the workers with their latest reports, the latest checkpoint and
the throughput of the last minutes. It reads the cluster's buckets and
the workers' reports through NATS alone, so it runs on any machine that
reaches NATS. The page is plain HTML that loads nothing from elsewhere
and reloads itself.`,
		Example: `  ackflow ui --nats nats://127.0.0.1:4222 --addr 127.0.0.1:8080`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			src, done, err := openClusterSource(ctx, nf)
			if err != nil {
				return err
			}
			defer done()
			if refresh <= 0 {
				refresh = -1 // never
			}
			srv, err := ui.Listen(addr, ui.Config{Source: src, Refresh: refresh})
			if err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "serving the status page of the cluster at %s on %s (Ctrl-C stops)\n", nf.url, srv.URL())
			<-ctx.Done()
			return srv.Close()
		},
	}
	nf.register(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "serve the page on http://ADDR/ (host:port; :0 picks a free port)")
	cmd.Flags().DurationVar(&refresh, "refresh", 2*time.Second, "how often the page reloads itself (0: never)")
	return cmd
}

// openClusterSource connects to the cluster's buckets for the page.
func openClusterSource(ctx context.Context, nf natsFlags) (*ui.Cluster, func(), error) {
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := openConn(octx, nf)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(c.nc)
	var members *cluster.KVMembers
	if err == nil {
		var timing cluster.MembersConfig
		if timing, err = cluster.Timing(octx, js); err == nil {
			members, err = cluster.NewKVMembers(octx, js, timing)
		}
	}
	if err != nil {
		c.close()
		return nil, nil, err
	}
	src := &ui.Cluster{Where: "cluster at " + c.nc.ConnectedUrlRedacted(), Registry: c.registry, Generations: c.gens,
		Elector: c.elector, Statuses: c.statuses, Members: members,
		Manifest: func(ctx context.Context, topo string, epoch uint64) (*checkpoint.Manifest, error) {
			bucket, err := checkpoint.BucketName(topo)
			if err != nil {
				return nil, err
			}
			if _, err := js.ObjectStore(ctx, bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
				return nil, fmt.Errorf("no checkpoint bucket %s", bucket)
			}
			store, err := checkpoint.NewObjectStore(ctx, js, bucket)
			if err != nil {
				return nil, err
			}
			return checkpoint.ReadManifest(ctx, store, topo, epoch)
		}}
	return src, c.close, nil
}
