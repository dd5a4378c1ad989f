package bench

import (
	"bytes"
	"context"
	"github.com/ackflow/ackflow/examples/wordcount"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/embednats"
)

// noLeaks checks for leaked goroutines after every other cleanup of t,
// including the server's shutdown, has run: call it first.
func noLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}

func startNATS(t *testing.T, cfg embednats.Config) *embednats.Server {
	t.Helper()
	s, err := embednats.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestRawNATS(t *testing.T) {
	noLeaks(t)
	s := startNATS(t, embednats.Config{NoJetStream: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const n = 200_000
	res, err := RawNATS(ctx, s.URL(), RawConfig{Messages: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raw NATS: %d msgs of 64 B in %s: %.0f msg/s", res.Messages, res.Elapsed, res.MsgsPerSec)
	if res.Messages != n || res.Dropped != 0 {
		t.Errorf("got %d messages with %d dropped; want %d with none dropped", res.Messages, res.Dropped, n)
	}
	if res.Elapsed <= 0 || res.MsgsPerSec <= 0 {
		t.Errorf("got elapsed %s and %v msg/s; want both positive", res.Elapsed, res.MsgsPerSec)
	}
}

func TestRawNATSStopsWithContext(t *testing.T) {
	noLeaks(t)
	s := startNATS(t, embednats.Config{NoJetStream: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RawNATS(ctx, s.URL(), RawConfig{Messages: 1000})
	if err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
		t.Fatalf("got %v; want a bench: error for a cancelled context", err)
	}
}

// wordText is n lines of words drawn with a fixed seed from a vocabulary
// that mixes case, digits, non-ASCII letters and punctuation, so that the
// chain's counts depend on SplitWords doing all of its job.
func wordText(n int) []string {
	vocab := []string{"the", "The", "NATS", "stream", "ack", "flow", "jet", "Ünïcode", "straße", "x42", "42"}
	seps := []string{" ", "  ", ", ", "; ", " -- ", "!", "\t"}
	r := rand.New(rand.NewPCG(1, 2))
	lines := make([]string, n)
	var b strings.Builder
	for i := range lines {
		b.Reset()
		for range 1 + r.IntN(16) {
			b.WriteString(vocab[r.IntN(len(vocab))])
			b.WriteString(seps[r.IntN(len(seps))])
		}
		lines[i] = b.String()
	}
	return lines
}

func TestJetStreamChain(t *testing.T) {
	noLeaks(t)
	lines := wordText(2000)
	want := map[string]int64{}
	words := 0
	for _, l := range lines {
		for _, w := range wordcount.SplitWords(l) {
			want[w]++
			words++
		}
	}

	for _, tc := range []struct {
		name string
		cfg  ChainConfig
	}{
		{"file", ChainConfig{}},
		// Small batches and a small async window exercise the stalls and
		// many rounds of publish-ack-then-ack.
		{"memory small batches", ChainConfig{Memory: true, Batch: 37, MaxPending: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startNATS(t, embednats.Config{StoreDir: t.TempDir()})
			// About 2 s alone under -race; the rest is room for a CI
			// machine busy with other packages' tests.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			res, err := JetStreamChain(ctx, s.URL(), lines, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("jetstream chain: %d lines, %d words in %s: %.0f records/s", res.Lines, res.Words, res.Elapsed, res.RecordsPerSec)
			if res.Lines != len(lines) || res.Words != words {
				t.Errorf("got %d lines and %d words; want %d and %d", res.Lines, res.Words, len(lines), words)
			}
			if !maps.Equal(res.Counts, want) {
				t.Errorf("counts differ:\n got %v\nwant %v", res.Counts, want)
			}
			if res.RecordsPerSec <= 0 {
				t.Errorf("got %v records/s; want a positive rate", res.RecordsPerSec)
			}

			// The run cleans up after itself.
			nc, err := nats.Connect(s.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			names := js.StreamNames(ctx)
			for name := range names.Name() {
				t.Errorf("stream %s is left after the run", name)
			}
			if err := names.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestJetStreamChainNoWords(t *testing.T) {
	noLeaks(t)
	s := startNATS(t, embednats.Config{StoreDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := JetStreamChain(ctx, s.URL(), []string{"", "!?", " -- "}, ChainConfig{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 3 || res.Words != 0 || len(res.Counts) != 0 || res.Elapsed <= 0 {
		t.Errorf("got %d lines, %d words, counts %v in %s; want 3 lines, no words, a positive time",
			res.Lines, res.Words, res.Counts, res.Elapsed)
	}
}

// A run cut short says how far each stage got and where the server has
// each consumer's messages, so a stalled run can be told from a slow one.
func TestJetStreamChainCutShortSaysWhere(t *testing.T) {
	noLeaks(t)
	s := startNATS(t, embednats.Config{StoreDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := JetStreamChain(ctx, s.URL(), wordText(20000), ChainConfig{Memory: true, Timeout: 200 * time.Millisecond})
	if err == nil {
		t.Fatal("got no error from a run with a 200 ms timeout over 20,000 lines")
	}
	t.Log(err)
	for _, want := range []string{"bench: jetstream chain stopped with", "consumer split:", "consumer count:", "undelivered", "the run did not finish within 200ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestJetStreamChainNeedsJetStream(t *testing.T) {
	noLeaks(t)
	s := startNATS(t, embednats.Config{NoJetStream: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := JetStreamChain(ctx, s.URL(), []string{"a b"}, ChainConfig{})
	if err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
		t.Fatalf("got %v; want a bench: error on a server without JetStream", err)
	}
}

// A run whose server goes away must end soon with an error that says where
// it stopped, not wait for its timeout. The server goes once the run is
// under way: a nats-server shut down while it creates a stream can leave
// that stream's store goroutines running (seen in CI: fileStore's
// flushStreamStateLoop and ats.Register outlived Shutdown), which is the
// server's race, not the run's.
func TestRunsEndWhenServerGoes(t *testing.T) {
	noLeaks(t)
	for name, tc := range map[string]struct {
		run func(ctx context.Context, url string) error
		// underWay returns once the run has set itself up.
		underWay func(ctx context.Context, t *testing.T, url string)
	}{
		"raw": {
			run: func(ctx context.Context, url string) error {
				_, err := RawNATS(ctx, url, RawConfig{Messages: 100_000_000})
				return err
			},
			underWay: func(context.Context, *testing.T, string) {},
		},
		"chain": {
			run: func(ctx context.Context, url string) error {
				_, err := JetStreamChain(ctx, url, wordText(100_000), ChainConfig{})
				return err
			},
			underWay: chainUnderWay,
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := embednats.Start(embednats.Config{StoreDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			down := make(chan struct{})
			go func() {
				defer close(down)
				tc.underWay(ctx, t, s.URL())
				time.Sleep(100 * time.Millisecond)
				s.Shutdown()
			}()
			start := time.Now()
			err = tc.run(ctx, s.URL())
			<-down
			if err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
				t.Fatalf("got %v; want a bench: error", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the run took %s to notice; want well under 10s", d)
			}
			t.Log(err)
		})
	}
}

// chainUnderWay returns once a JetStream chain has made both its streams
// and their consumers, and lines are stored: what is left is the run.
func chainUnderWay(ctx context.Context, t *testing.T, url string) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Error(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Error(err)
		return
	}
	for ctx.Err() == nil {
		ready, lines := 0, uint64(0)
		for name := range js.StreamNames(ctx).Name() {
			st, err := js.Stream(ctx, name)
			if err != nil {
				continue
			}
			info, err := st.Info(ctx)
			if err != nil || info.State.Consumers == 0 {
				continue
			}
			ready++
			if strings.HasPrefix(name, "JSC_LINES_") {
				lines = info.State.Msgs
			}
		}
		if ready == 2 && lines > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the chain was not under way before %v", ctx.Err())
}

func TestConfigValidate(t *testing.T) {
	for _, err := range []error{
		RawConfig{Messages: -1}.Validate(),
		RawConfig{Size: -1}.Validate(),
		RawConfig{Timeout: -time.Second}.Validate(),
		ChainConfig{Batch: -1}.Validate(),
		ChainConfig{MaxPending: -1}.Validate(),
		ChainConfig{Timeout: -time.Second}.Validate(),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("got %v; want a bench: error", err)
		}
	}
	if err := (RawConfig{}).Validate(); err != nil {
		t.Errorf("zero RawConfig: %v", err)
	}
	if err := (ChainConfig{}).Validate(); err != nil {
		t.Errorf("zero ChainConfig: %v", err)
	}
}

func TestWriteSVG(t *testing.T) {
	c := Chart{
		Throughput: []ThroughputBar{
			{"raw NATS", 1_043_000},
			{"JetStream chain", 131_500},
			{"ackflow <at-least-once>", 2_400_000},
		},
		Latency: []LatencyBar{{"p50", 0.8}, {"p99", 4.2}, {"p99.9", 17}},
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, c); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()
	if !strings.HasPrefix(doc, "<?xml") && !strings.HasPrefix(doc, "<svg") {
		t.Fatalf("document starts with %.40q; want an SVG document", doc)
	}
	for _, want := range []string{
		// Names over 10 characters break onto two lines at a hyphen.
		"raw NATS", "JetStream chain", "ackflow &lt;at-", "least-once&gt;", "p50", "p99", "p99.9",
		"Throughput", "Latency", "records / s", "milliseconds",
		"1.04M", "132k", "2.4M", "0.8", "4.2", "17",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestWrapName(t *testing.T) {
	for in, want := range map[string]string{
		"raw-nats":              "raw-nats",
		"jetstream-chain":       "jetstream-\nchain",
		"at-least-once-dedup":   "at-least-\nonce-dedup",
		"averyveryverylongname": "averyveryverylongname",
	} {
		if got := wrapName(in); got != want {
			t.Errorf("wrapName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteSVGOnePanel(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, Chart{Throughput: []ThroughputBar{{"only", 10}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "only") || strings.Contains(buf.String(), "Latency") {
		t.Error("want the throughput panel alone")
	}
}

func TestWriteSVGRejects(t *testing.T) {
	for name, c := range map[string]Chart{
		"empty":    {},
		"negative": {Latency: []LatencyBar{{"p50", -1}}},
	} {
		if err := WriteSVG(&bytes.Buffer{}, c); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("%s: got %v; want a bench: error", name, err)
		}
	}
}

func TestFormatValues(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{formatRate(0), "0"},
		{formatRate(950), "950"},
		{formatRate(1000), "1k"},
		{formatRate(78_949), "78.9k"},
		{formatRate(456_400), "456k"},
		{formatRate(1_234_567), "1.23M"},
		{formatRate(2_000_000), "2M"},
		{formatRate(12_500_000), "12.5M"},
		{formatMillis(0.000012345), "0.0000123"},
		{formatMillis(0.4213), "0.421"},
		{formatMillis(0.9), "0.9"},
		{formatMillis(4.2), "4.2"},
		{formatMillis(12.5), "12.5"},
		{formatMillis(99.99), "100"},
		{formatMillis(1200), "1200"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q; want %q", tc.got, tc.want)
		}
	}
}
