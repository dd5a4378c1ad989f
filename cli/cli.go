// Package cli is the ackflow command line: local runs, the benchmark, a
// development NATS server, checkpoints, and cluster mode (the worker and
// the operations commands submit, list, status, rebalance and kill). It
// only parses flags and calls the packages that do the work.
//
// The ackflow binary is Main with the bundled topologies. A worker binary
// for your own topologies is Main with yours; every worker of a cluster
// runs the same binary, and the operations commands of any of them talk
// to the cluster through NATS alone:
//
//	func main() {
//		cli.Main(cli.Topologies{
//			"clicks": func(s cli.Settings) (*topology.Topology, error) {
//				if err := s.Only("stream"); err != nil {
//					return nil, err
//				}
//				return clicks.Build(s.String("stream", "CLICKS"))
//			},
//		})
//	}
package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ackflow/ackflow/internal/heapfloor"
	"github.com/ackflow/ackflow/internal/hugepages"
	"github.com/rs/zerolog"

	"github.com/spf13/cobra"
)

// defaultGCPercent and defaultHeapFloor trade memory for latency: ackflow's
// live heap is small (bounded queues and logs) while it allocates per
// record, so Go's default of 100 collects every few milliseconds and shows
// up in tail latency (p99 at half load fell from about 20 ms to 8 ms in
// `ackflow bench` at 400). At 400 a live heap of 10-20 MB was still
// collected several times a second; the floor holds the heap goal at 256 MiB
// at least (package heapfloor). The GOGC environment variable overrides
// both; ACKFLOW_HEAP_FLOOR sets the floor ("0" for none).
const (
	defaultGCPercent = 400
	defaultHeapFloor = 256 << 20
)

// hugePagesEvery is how often the heap's new mappings are advised for
// transparent huge pages (package hugepages): the runtime maps the heap in
// pieces of a few MiB as it grows, and the pages it touches before the
// advice are 4 KiB ones. ACKFLOW_HUGEPAGES=0 turns the advice off.
const hugePagesEvery = 50 * time.Millisecond

// heapFloorBytes is the heap floor Main set, 0 for none.
var heapFloorBytes uint64

// prefaultHeap faults the heap floor's memory in before a worker joins
// its cluster (hugepages.Prefault), as the JVM's -XX:+AlwaysPreTouch does
// for a fixed heap: a fresh worker's heap grows to the floor before its
// first collection, and each page it touches for the first time costs a
// fault in the tasks' time. On this project's virtual machines the suite's
// word count on three fresh worker processes moved 2.2-2.4 million
// records/s with the workers' heaps prefaulted against 1.6 without
// (docs/performance.md, round twenty-two). The cost is at start-up, 30 ms
// to 0.8 s for 256 MiB, and resident memory: the floor's worth at once,
// until the worker, if it stays idle, gives it back at its periodic
// collection. Only the worker command does it: `run` of a short job would
// pay for memory it never uses (a background prefault made `ackflow run
// wordcount` keep 290 MB instead of 70). ACKFLOW_PREFAULT=0 turns it off;
// without a floor (GOGC set, or ACKFLOW_HEAP_FLOOR=0) there is nothing to
// do.
func prefaultHeap(log zerolog.Logger) {
	if heapFloorBytes == 0 || os.Getenv("ACKFLOW_PREFAULT") == "0" {
		return
	}
	took := hugepages.Prefault(heapFloorBytes)
	log.Info().Uint64("MiB", heapFloorBytes>>20).Dur("took", took).Msg("heap floor prefaulted (ACKFLOW_PREFAULT=0 skips this)")
}

// Main runs the command line with topos as the topologies this binary can
// run in cluster mode, and exits.
func Main(topos Topologies) {
	var floor uint64
	if os.Getenv("GOGC") == "" {
		var err error
		if floor, err = heapFloor(os.Getenv("ACKFLOW_HEAP_FLOOR")); err != nil {
			fmt.Fprintln(os.Stderr, "ackflow:", err)
			os.Exit(1)
		}
		heapfloor.Start(floor, defaultGCPercent)
		heapFloorBytes = floor
	}
	if os.Getenv("ACKFLOW_HUGEPAGES") != "0" {
		// The heap grows to the floor before its first collection: advise
		// that much at once.
		if _, err := hugepages.Start(hugePagesEvery, floor); err != nil {
			fmt.Fprintln(os.Stderr, "ackflow: warning: the heap goes on with 4 KiB pages:", err)
		}
	}
	// Milliseconds in log times: failover takes seconds, and the logs of
	// several workers are read side by side.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	if err := NewRoot(topos).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ackflow:", err)
		os.Exit(1)
	}
}

// NewRoot returns the root command, for tests and for programs that add
// commands of their own.
func NewRoot(topos Topologies) *cobra.Command {
	root := &cobra.Command{
		Use:   "ackflow",
		Short: "A Storm-style streaming runtime over NATS",
		Long: `ackflow runs topologies of spouts and bolts written in Go. Records travel
over NATS; XOR ackers track each source record's tree and replay what
failed.

Local mode runs a bundled topology in this process (run). Cluster mode runs
worker processes on many machines that share a NATS cluster (worker), and
operates them through NATS alone (submit, list, status, rebalance, kill).`,
		Example: `  ackflow run wordcount
  ackflow run wordcount --guarantee at-least-once --workers 3 --chaos "drop=0.05,seed=1"
  ackflow nats
  ackflow worker --nats nats://127.0.0.1:4222 --name w1
  ackflow submit wordcount --nats nats://127.0.0.1:4222 --guarantee exactly-once
  ackflow status wordcount --nats nats://127.0.0.1:4222
  ackflow bench --quick`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newNATSCmd(), newBenchCmd(topos), newCheckpointsCmd())
	root.AddCommand(clusterCommands(topos)...)
	return root
}

// heapFloor reads ACKFLOW_HEAP_FLOOR: a size in bytes with an optional
// KiB, MiB or GiB suffix, or empty for the default.
func heapFloor(v string) (uint64, error) {
	if v == "" {
		return defaultHeapFloor, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, fmt.Errorf("ACKFLOW_HEAP_FLOOR=%q: %w; give a size such as 256MiB, or 0 for none", v, err)
	}
	return n, nil
}

// parseSize reads "256MiB", "1GiB", "512KiB" or a number of bytes.
func parseSize(v string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, errors.New("not a size")
	}
	return n * mult, nil
}
