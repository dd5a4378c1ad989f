package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ackflow/ackflow/embednats"
	"github.com/spf13/cobra"
)

func newNATSCmd() *cobra.Command {
	var addr, store string
	var logging bool
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run a NATS server with JetStream for development and tests",
		Example: `  ackflow nats
  ackflow nats --addr 127.0.0.1:4333 --store /tmp/ackflow-js`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := embednats.Start(embednats.Config{Addr: addr, StoreDir: store, Logging: logging})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "NATS server with JetStream listening on %s (Ctrl-C stops it)\n", srv.URL())
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			<-sig
			srv.Shutdown()
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:4222", "host:port to listen on")
	cmd.Flags().StringVar(&store, "store", "", "JetStream store directory (default: a temporary directory removed on exit)")
	cmd.Flags().BoolVar(&logging, "log", false, "print the server's own log")
	return cmd
}
