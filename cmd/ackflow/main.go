// Command ackflow runs ackflow topologies, a development NATS server and the
// benchmark suite. It only parses flags and calls the packages that do the
// work.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ackflow:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "ackflow",
		Short: "A Storm-style streaming runtime over NATS",
		Long: `ackflow runs topologies of spouts and bolts written in Go. Records travel
over NATS; XOR ackers track each source record's tree and replay what
failed.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newNATSCmd())
	return root
}
