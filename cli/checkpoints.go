package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/spf13/cobra"
)

func newCheckpointsCmd() *cobra.Command {
	var dir, topology string
	var asJSON bool
	root := &cobra.Command{
		Use:   "checkpoints",
		Short: "List and inspect the checkpoints in a checkpoint directory",
		Example: `  ackflow checkpoints list --dir ckpt
  ackflow checkpoints inspect --dir ckpt --topology wordcount
  ackflow checkpoints inspect --dir ckpt --topology wordcount 12 --json`,
	}
	root.PersistentFlags().StringVar(&dir, "dir", "", "the checkpoint directory (as given to ackflow run --checkpoint-dir)")
	root.PersistentFlags().StringVar(&topology, "topology", "", "the topology (default: every topology in the directory)")
	open := func() (*checkpoint.Dir, error) {
		if dir == "" {
			return nil, errors.New("give the checkpoint directory with --dir")
		}
		return checkpoint.NewDir(dir)
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the epochs of each topology: complete or not, size, pause, positions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := open()
			if err != nil {
				return err
			}
			return listCheckpoints(cmd.Context(), cmd.OutOrStdout(), store, topology)
		},
	}
	inspect := &cobra.Command{
		Use:   "inspect [EPOCH]",
		Short: "Show one epoch's manifest (default: the latest complete one)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := open()
			if err != nil {
				return err
			}
			if topology == "" {
				return errors.New("give the topology with --topology (ackflow checkpoints list shows them)")
			}
			var epoch uint64
			if len(args) == 1 {
				if epoch, err = strconv.ParseUint(args[0], 10, 64); err != nil || epoch == 0 {
					return fmt.Errorf("epoch %q: give a positive number", args[0])
				}
			}
			return inspectCheckpoint(cmd.Context(), cmd.OutOrStdout(), store, topology, epoch, asJSON)
		},
	}
	inspect.Flags().BoolVar(&asJSON, "json", false, "print the manifest as JSON")
	root.AddCommand(list, inspect)
	return root
}

func listCheckpoints(ctx context.Context, w io.Writer, store checkpoint.Store, only string) error {
	topologies := []string{only}
	if only == "" {
		var err error
		if topologies, err = checkpoint.Topologies(ctx, store); err != nil {
			return err
		}
		if len(topologies) == 0 {
			fmt.Fprintln(w, "no checkpoints")
			return nil
		}
	}
	for _, topo := range topologies {
		epochs, err := checkpoint.ListEpochs(ctx, store, topo)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %d epochs\n", topo, len(epochs))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  epoch\tstate\ttaken\tsize\tpause\ttook\tpositions")
		for _, e := range epochs {
			state, taken, pause, took, positions := "complete", "-", "-", "-", ""
			if e.Err != nil {
				state = "refused: " + e.Err.Error()
			} else if !e.Complete {
				state = "incomplete"
			}
			if m := e.Manifest; m != nil {
				taken = m.Started.Format(time.DateTime)
				pause, took = m.Pause.Round(time.Microsecond).String(), m.Duration.Round(time.Microsecond).String()
				positions = spoutPositions(m)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Epoch, state, taken, size(e.Size), pause, took, positions)
		}
		tw.Flush()
	}
	return nil
}

func inspectCheckpoint(ctx context.Context, w io.Writer, store checkpoint.Store, topo string, epoch uint64, asJSON bool) error {
	if epoch == 0 {
		epochs, err := checkpoint.ListEpochs(ctx, store, topo)
		if err != nil {
			return err
		}
		for _, e := range epochs {
			if e.Complete && e.Err == nil {
				epoch = e.Epoch
				break
			}
		}
		if epoch == 0 {
			return fmt.Errorf("%s has no complete checkpoint", topo)
		}
	}
	m, err := checkpoint.ReadManifest(ctx, store, topo, epoch)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	fmt.Fprintf(w, "%s epoch %d, taken %s: spouts paused %v, %v to the manifest\nfingerprint %s\n", m.Topology, m.Epoch,
		m.Started.Format(time.RFC3339), m.Pause.Round(time.Microsecond), m.Duration.Round(time.Microsecond), m.Fingerprint)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "task\tcomponent\tsize\tsha256\tposition")
	for _, t := range m.Tasks {
		pos := "-"
		if t.Position != nil {
			pos = fmt.Sprintf("%x", t.Position)
		}
		fmt.Fprintf(tw, "%d\t%s[%d]\t%s\t%.12s\t%s\n", t.Task, t.Component, t.Index, size(t.Size), t.SHA256, pos)
	}
	return tw.Flush()
}

// spoutPositions renders the spouts' positions of a manifest, in hex (a
// position is the spout's own encoding).
func spoutPositions(m *checkpoint.Manifest) string {
	s := ""
	for _, t := range m.Tasks {
		if t.Position != nil {
			s += fmt.Sprintf("%s[%d]=%x ", t.Component, t.Index, t.Position)
		}
	}
	return s
}

func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
