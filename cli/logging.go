package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/workers"
)

// logLevelEnv sets the default of every --log-level flag.
const logLevelEnv = "ACKFLOW_LOG_LEVEL"

// logLevelFlag registers --log-level with def as its default, unless
// ACKFLOW_LOG_LEVEL says otherwise.
func logLevelFlag(fl *pflag.FlagSet, p *string, def string) {
	if v := os.Getenv(logLevelEnv); v != "" {
		def = v
	}
	fl.StringVar(p, "log-level", def, "debug, info, warn or error; logs go to stderr, JSON lines unless it is a terminal ($"+logLevelEnv+")")
}

// parseLogLevel reads --log-level.
func parseLogLevel(s string) (zerolog.Level, error) {
	level, err := workers.ParseLevel(s)
	if err != nil {
		return level, fmt.Errorf("bad --log-level: %w", err)
	}
	return level, nil
}

func newLogLevelCmd() *cobra.Command {
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "loglevel TOPOLOGY LEVEL",
		Short: "Change a running topology's log level on every worker",
		Long: `loglevel sets the log level of a submitted topology on every worker that
runs it, while it runs (Storm's set_log_level): debug, info, warn or error,
or "default" for each worker's own --log-level. The level is part of the
submission, so a worker that joins later uses it too; the workers apply it
within moments and log the change.`,
		Example: `  ackflow loglevel wordcount debug
  ackflow loglevel wordcount default`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, level := args[0], args[1]
			if level == "default" {
				level = ""
			} else if l, err := workers.ParseLevel(level); err != nil {
				return err
			} else {
				level = l.String()
			}
			ctx, c, done, err := dial(cmd.Context(), nf, 30*time.Second)
			if err != nil {
				return err
			}
			defer done()
			// Another writer (the leader, rebalance, kill) may update the
			// submission meanwhile: read again and retry.
			for attempt := 0; ; attempt++ {
				spec, rev, err := c.registry.Get(ctx, name)
				if err != nil {
					return err
				}
				if spec.State != cluster.StateRunning && spec.State != cluster.StateKilling && spec.State != cluster.StateFinishing {
					return fmt.Errorf("%s is %s; only a running topology has workers to tell", name, spec.State)
				}
				spec.LogLevel = level
				_, err = c.registry.Update(ctx, spec, rev)
				if errors.Is(err, cluster.ErrConflict) && attempt < 10 {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err != nil {
					return err
				}
				break
			}
			if level == "" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s logs at each worker's own --log-level again\n", name)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s logs at %s on every worker (ackflow loglevel %s default undoes it)\n", name, level, name)
			}
			return nil
		},
	}
	nf.register(cmd.Flags())
	return cmd
}
