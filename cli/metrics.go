package cli

import (
	"fmt"

	"github.com/ackflow/ackflow/metrics"
	"github.com/spf13/cobra"
)

// metricsFlagHelp describes --metrics for run and worker.
const metricsFlagHelp = "serve Prometheus metrics on http://ADDR/metrics while the command runs, e.g. 127.0.0.1:9464 (docs/metrics.md)"

// serveMetrics starts the /metrics server of --metrics addr, before the
// command does anything else, so that a port in use stops it at once. It
// returns the registry for the runtime's Config and what stops the server.
func serveMetrics(cmd *cobra.Command, addr string) (*metrics.Registry, func(), error) {
	reg := metrics.NewRegistry()
	srv, err := metrics.Listen(addr, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "serving metrics on http://%s/metrics\n", srv.Addr())
	return reg, func() { srv.Close() }, nil
}
