package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/examples/pageviews"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// runPageviews generates page views into a JetStream stream, counts them
// per URL and window, and checks the counts delivered to the counts stream
// against the generator's.
func runPageviews(cmd *cobra.Command, f runFlags, cfg workers.Config, letters *deadletter.File) error {
	if f.events < 1 {
		return fmt.Errorf("--events %d: generate at least one", f.events)
	}
	url := f.nats.url
	if url == "" {
		srv, err := embednats.Start(embednats.Config{})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.URL()
	}
	cfg.NATSURL = url
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("ackflow run pageviews")}, cfg.NATSOptions...)...)
	if err != nil {
		return explainConnect(url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	events := pageviews.Generate(f.events, 1)
	if !f.resume {
		// A resumed run reads the streams its first run made.
		if err := pageviews.CreateStreams(ctx, js); err != nil {
			return fmt.Errorf("%w (ackflow run pageviews needs JetStream on the server)", err)
		}
		if err := pageviews.Publish(ctx, js, events); err != nil {
			return err
		}
	}
	job, err := pageviews.New(pageviews.Config{URL: url, Window: f.window, EventsPerSec: f.rate})
	if err != nil {
		return err
	}
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	interrupted := err != nil && sum != nil && ctx.Err() != nil && cmd.Context().Err() == nil
	if err != nil && !interrupted {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	got, dups, err := pageviews.ReadCounts(rctx, js)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	printWindows(w, got)
	printSummary(w, sum)
	printDeadLetters(w, sum, letters)
	if interrupted {
		return errors.New("interrupted before every window closed")
	}
	return checkWindows(w, got, pageviews.Oracle(events, f.window), dups, job.Late(), sum)
}

// printWindows shows the busiest windows.
func printWindows(w io.Writer, counts map[pageviews.Window]int64) {
	type wc struct {
		w pageviews.Window
		n int64
	}
	all := make([]wc, 0, len(counts))
	for k, n := range counts {
		all = append(all, wc{k, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].w.Start < all[j].w.Start || all[i].w.Start == all[j].w.Start && all[i].w.URL < all[j].w.URL
	})
	fmt.Fprintf(w, "%d windows delivered; the busiest:\n", len(counts))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i < len(all) && i < 10; i++ {
		fmt.Fprintf(tw, "  %s\t%s\t%d views\n", all[i].w.URL, time.UnixMilli(all[i].w.Start).UTC().Format(time.TimeOnly), all[i].n)
	}
	tw.Flush()
}

// checkWindows compares the delivered counts with the generator's.
func checkWindows(w io.Writer, got, want map[pageviews.Window]int64, dups int, late int64, s *workers.Summary) error {
	wrong, missing := 0, 0
	for k, n := range want {
		switch c, ok := got[k]; {
		case !ok:
			missing++
		case c != n:
			wrong++
		}
	}
	fmt.Fprintf(w, "windows against the generator's: %d missing, %d wrong, %d delivered twice, %d late events\n", missing, wrong, dups, late)
	switch {
	case missing+wrong+dups == 0:
		return nil
	case s.Guarantee == workers.AtMostOnce:
		return nil // at-most-once may lose, and says so above
	case late > 0:
		return fmt.Errorf("%d events came after their window closed; raise --window or the lateness", late)
	case dups > 0 && s.Guarantee == workers.AtLeastOnce:
		return nil // at-least-once may deliver twice
	}
	return fmt.Errorf("%s delivered %d windows wrong, missed %d and repeated %d: this is a bug, please report it with the command line", s.Guarantee, wrong, missing, dups)
}
