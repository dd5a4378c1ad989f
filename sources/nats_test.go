package sources_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestNATSRefusesReplayableGuarantees(t *testing.T) {
	for _, g := range []string{"at-least-once", "exactly-once", ""} {
		sp := sources.NewNATS(sources.NATSConfig{URL: "nats://127.0.0.1:1", Subject: "x"})
		err := sp.Open(taskContext(0, 1, g), &collector{})
		if err == nil || !strings.Contains(err.Error(), "cannot be replayed") || !strings.Contains(err.Error(), "JetStream spout") {
			t.Fatalf("Open with guarantee %q = %v, want a refusal that points to the JetStream spout", g, err)
		}
	}
}

func TestNATSConfigErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		cfg  sources.NATSConfig
		want string
	}{
		{"no URL", sources.NATSConfig{Subject: "x"}, "URL is empty"},
		{"no subject", sources.NATSConfig{URL: "nats://127.0.0.1:1"}, "is not a subject"},
		{"negative buffer", sources.NATSConfig{URL: "nats://127.0.0.1:1", Subject: "x", Buffer: -1}, "negative"},
		{"unreachable server", sources.NATSConfig{URL: "nats://127.0.0.1:1", Subject: "x"}, "cannot connect to NATS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sources.NewNATS(tc.cfg).Open(taskContext(0, 1, "at-most-once"), &collector{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sources: ") {
				t.Fatalf("Open = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func startNATS(t *testing.T) (*embednats.Server, *nats.Conn) {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	return srv, nc
}

func publishN(t *testing.T, nc *nats.Conn, subject string, from, n int) {
	t.Helper()
	for k := from; k < from+n; k++ {
		if err := nc.Publish(subject, fmt.Appendf(nil, "m%d", k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestNATSDropsAndLogsWhenTheBufferIsFull(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, nc := startNATS(t)
	defer srv.Shutdown()
	defer nc.Close()
	var logs testbuf.Buffer
	tc := taskContext(1, 2, "at-most-once")
	tc.Logger = zerolog.New(&logs)
	var out collector
	sp := sources.NewNATS(sources.NATSConfig{URL: srv.URL(), Subject: "events.>", Buffer: 10, StopAfter: 10})
	open(t, sp, tc, &out)
	defer sp.Close()
	publishN(t, nc, "events.a", 0, 2500)
	for deadline := time.Now().Add(5 * time.Second); sp.Dropped() < 2490 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if sp.Dropped() != 2490 {
		t.Fatalf("dropped %d of 2500 messages with a buffer of 10, want 2490", sp.Dropped())
	}
	if n := strings.Count(logs.String(), "NATS message dropped"); n != 3 {
		t.Fatalf("logged %d drops, want 3 (the 1st, 1001st and 2001st):\n%s", n, logs.String())
	}
	if err := sp.Next(t.Context()); !errors.Is(err, topology.ErrExhausted) {
		t.Fatalf("Next after StopAfter messages: %v", err)
	}
	for k, r := range out.recs {
		if r.ID != (topology.MsgID{Partition: 1, Offset: int64(k)}) || string(r.Values[1].([]byte)) != fmt.Sprintf("m%d", k) || r.Values[0] != "events.a" {
			t.Fatalf("record %d is %+v", k, r)
		}
	}
	if len(out.recs) != 10 {
		t.Fatalf("emitted %d, want the 10 buffered", len(out.recs))
	}
}

func TestNATSStopsWhenIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, nc := startNATS(t)
	defer srv.Shutdown()
	defer nc.Close()
	var out collector
	sp := sources.NewNATS(sources.NATSConfig{URL: srv.URL(), Subject: "events", StopWhenIdle: 300 * time.Millisecond, MaxWait: 10 * time.Millisecond})
	open(t, sp, taskContext(0, 1, "at-most-once"), &out)
	defer sp.Close()
	publishN(t, nc, "events", 0, 5)
	start := time.Now()
	drain(t, sp)
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("stopped after %v idle, want about 300ms", d)
	}
	if len(out.recs) != 5 {
		t.Fatalf("emitted %d, want 5", len(out.recs))
	}
}

func TestNATSDecodeErrorsAreDrops(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, nc := startNATS(t)
	defer srv.Shutdown()
	defer nc.Close()
	var out collector
	sp := sources.NewNATS(sources.NATSConfig{
		URL: srv.URL(), Subject: "events", StopAfter: 4,
		Decode: func(m *nats.Msg) (topology.Values, error) {
			if string(m.Data) == "m2" {
				return nil, errors.New("bad")
			}
			return topology.Values{string(m.Data)}, nil
		},
	})
	open(t, sp, taskContext(0, 1, "at-most-once"), &out)
	defer sp.Close()
	publishN(t, nc, "events", 0, 5)
	drain(t, sp)
	var got []string
	for _, r := range out.recs {
		got = append(got, r.Values[0].(string))
	}
	if !slices.Equal(got, []string{"m0", "m1", "m3", "m4"}) || sp.Dropped() != 1 {
		t.Fatalf("emitted %v and dropped %d; want m2 dropped", got, sp.Dropped())
	}
}

// openSignal tells a test when a spout's Open has returned: a NATS
// spout's subscription is live from then on.
type openSignal struct {
	topology.Spout
	opened *sync.WaitGroup
}

func (o openSignal) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	defer o.opened.Done()
	return o.Spout.Open(tc, out)
}

// TestNATSRunAtMostOnce runs two tasks through the runtime: they share a
// queue group, so every message published reaches the sink once.
func TestNATSRunAtMostOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv, nc := startNATS(t)
	defer srv.Shutdown()
	defer nc.Close()
	const n = 3000
	var opened sync.WaitGroup
	opened.Add(2)
	var mu sync.Mutex
	var spouts []*sources.NATS
	cfg := sources.NATSConfig{URL: srv.URL(), Subject: "events.*", StopWhenIdle: time.Second}
	sink := flowtest.NewSink()
	b := topology.NewBuilder("events")
	b.Spout("events", func() topology.Spout {
		sp := sources.NewNATS(cfg)
		mu.Lock()
		spouts = append(spouts, sp)
		mu.Unlock()
		return openSignal{sp, &opened}
	}, 2).Outputs("subject", "data")
	b.Bolt("sink", sink.Bolt, 2).Input("events", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		opened.Wait()
		for k := range n {
			nc.Publish(fmt.Sprintf("events.%d", k%5), fmt.Appendf(nil, "m%d", k))
		}
		nc.Flush()
	}()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtMostOnce})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, v := range sink.Values() {
		seen[string(v[1].([]byte))]++
	}
	for k := range n {
		if c := seen[fmt.Sprintf("m%d", k)]; c != 1 {
			t.Fatalf("message %d reached the sink %d times, want once", k, c)
		}
	}
	dropped := int64(0)
	for _, sp := range spouts {
		dropped += sp.Dropped()
	}
	if len(seen) != n || dropped != 0 || sum.Component("events").Emitted != n {
		t.Fatalf("the sink saw %d messages, the spouts dropped %d and emitted %d; want %d, 0, %d", len(seen), dropped, sum.Component("events").Emitted, n, n)
	}
}
