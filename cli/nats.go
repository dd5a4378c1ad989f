package cli

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
	var sec embednats.Config
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run a NATS server with JetStream for development and tests",
		Example: `  ackflow nats
  ackflow nats --addr 127.0.0.1:4333 --store /tmp/ackflow-js
  ackflow nats --user ackflow --password s3cret --tls-cert server.pem --tls-key server-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := sec
			cfg.Addr, cfg.StoreDir, cfg.Logging = addr, store, logging
			srv, err := embednats.Start(cfg)
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
	fl := cmd.Flags()
	fl.BoolVar(&logging, "log", false, "print the server's own log")
	// A development server can still be a secured one, so that what runs
	// against it runs against a secured cluster too.
	fl.StringVar(&sec.User, "user", "", "the one user clients log in as (with --password)")
	fl.StringVar(&sec.Password, "password", "", "that user's password")
	fl.StringVar(&sec.Token, "token", "", "the token clients present instead")
	fl.StringVar(&sec.TLSCert, "tls-cert", "", "serve TLS only, with this certificate (with --tls-key)")
	fl.StringVar(&sec.TLSKey, "tls-key", "", "the certificate's key")
	fl.StringVar(&sec.TLSCA, "tls-ca", "", "also require client certificates signed by this CA")
	return cmd
}
