package cli

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ackflow/ackflow/bench"
	"github.com/spf13/cobra"
)

func newBenchCmd(topos Topologies) *cobra.Command {
	var quick bool
	var jsonPath, svgPath string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure ackflow against raw NATS and a chained-JetStream pipeline",
		Long: `bench runs, on one embedded NATS server: raw NATS pub/sub, the same word
count as a chain of JetStream streams, ackflow word count in every guarantee
that exists and with Prometheus metrics scraped every 100 ms, complete
latency at half load, scaling with parallelism and record size, recovery
from a worker crash, and memory per bookkeeping entry.
Figures are reported as ratios measured in the same run. It fails only if a
run errors or loses records, never on timing.`,
		Example: `  ackflow bench
  ackflow bench --quick
  ackflow bench --json bench.json          # also writes bench.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The cluster row starts this binary as workers, which need the
			// bundled word count.
			self := ""
			if _, ok := topos["wordcount"]; ok {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("cannot find this binary to start cluster workers: %w", err)
				}
				self = exe
			}
			rep, err := bench.RunSuite(ctx, bench.SuiteConfig{Quick: quick, Log: cmd.ErrOrStderr(), WorkerBinary: self})
			if err != nil {
				return err
			}
			if bad := rep.Impossible(); len(bad) > 0 {
				return fmt.Errorf("the report has figures that cannot be true, so it is not printed (a bug in the suite; please report it with this output):\n  %s", strings.Join(bad, "\n  "))
			}
			fmt.Fprintln(cmd.ErrOrStderr())
			rep.WriteTable(cmd.OutOrStdout())
			if jsonPath != "" {
				if err := rep.WriteJSON(jsonPath); err != nil {
					return fmt.Errorf("writing %s: %w", jsonPath, err)
				}
				if svgPath == "" {
					svgPath = strings.TrimSuffix(jsonPath, ".json") + ".svg"
				}
			}
			if svgPath != "" {
				f, err := os.Create(svgPath)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := bench.WriteSVG(f, rep.Chart()); err != nil {
					return fmt.Errorf("writing %s: %w", svgPath, err)
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&quick, "quick", false, "small inputs: the CI smoke profile, under a minute")
	cmd.Flags().StringVar(&jsonPath, "json", "", "also write the report as JSON here (and the chart next to it as .svg)")
	cmd.Flags().StringVar(&svgPath, "svg", "", "write the chart here")
	return cmd
}
