package sources_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// jsServer is an embedded server with a stream ORDERS on orders.>. Shut
// it down with a defer after goleak's, so that goleak runs after it.
type jsServer struct {
	srv *embednats.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startJetStream(t *testing.T) *jsServer {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	return &jsServer{srv: srv, nc: nc, js: js}
}

func (s *jsServer) Shutdown() {
	s.nc.Close()
	s.srv.Shutdown()
}

// publish adds n messages: "m<k>" on orders.<k mod 3>, k counting on from
// the messages already there, so that message k has stream sequence k.
func (s *jsServer) publish(t *testing.T, n int) {
	t.Helper()
	info, err := s.js.Stream(t.Context(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	first := int(info.CachedInfo().State.LastSeq) + 1
	for k := first; k < first+n; k++ {
		if _, err := s.js.Publish(t.Context(), fmt.Sprintf("orders.%d", k%3), fmt.Appendf(nil, "m%d", k)); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *jsServer) config() sources.JetStreamConfig {
	return sources.JetStreamConfig{URL: s.srv.URL(), Stream: "ORDERS", StopAtEnd: true}
}

// seqs returns the stream sequences the records name, and checks each
// record's values are the default decode of message k.
func seqs(t *testing.T, c *collector) []int64 {
	t.Helper()
	out := c.offsets()
	for _, r := range c.recs {
		k := r.ID.Offset
		subject, data := r.Values[0].(string), string(r.Values[1].([]byte))
		if subject != fmt.Sprintf("orders.%d", k%3) || data != fmt.Sprintf("m%d", k) {
			t.Fatalf("message %d arrived as %q %q", k, subject, data)
		}
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for k := from; k <= to; k++ {
		out = append(out, k)
	}
	return out
}

func sorted(s []int64) []int64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestJetStreamTasksSplitTheStream(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 101)
	var all []int64
	for i := range 2 {
		var out collector
		sp := sources.NewJetStream(s.config())
		open(t, sp, taskContext(i, 2, "at-least-once"), &out)
		drain(t, sp)
		checkClose(t, sp)
		for _, k := range seqs(t, &out) {
			if k%2 != int64(i) {
				t.Fatalf("task %d of 2 emitted sequence %d", i, k)
			}
		}
		all = append(all, out.offsets()...)
	}
	if got := sorted(all); !slices.Equal(got, span(1, 101)) {
		t.Fatalf("the two tasks emitted %v, want 1..101 once each", got)
	}
}

func TestJetStreamSeekContinuesWithTheSameIDs(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 60)
	cfg := s.config()
	cfg.PerNext = 7
	for p := 1; p <= 2; p++ {
		for i := range p {
			checkPositioned(t, func() topology.Spout { return sources.NewJetStream(cfg) }, taskContext(i, p, "exactly-once"), 3)
		}
	}
}

func TestJetStreamFiltersSubjectsAndStartSequence(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 30)
	cfg := s.config()
	cfg.Subjects = []string{"orders.1", "orders.2"}
	cfg.StartSequence = 10
	cfg.OutputStream = "orders"
	var out collector
	sp := sources.NewJetStream(cfg)
	open(t, sp, taskContext(0, 1, "at-least-once"), &out)
	drain(t, sp)
	checkClose(t, sp)
	var want []int64
	for k := int64(10); k <= 30; k++ {
		if k%3 != 0 {
			want = append(want, k)
		}
	}
	if got := seqs(t, &out); !slices.Equal(got, want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}
	if out.recs[0].Stream != "orders" {
		t.Fatalf("emitted on %q, want orders", out.recs[0].Stream)
	}
}

func TestJetStreamStopAtEndIgnoresLaterMessages(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 10)
	var out collector
	sp := sources.NewJetStream(s.config())
	open(t, sp, taskContext(0, 1, "at-least-once"), &out)
	s.publish(t, 10)
	drain(t, sp)
	checkClose(t, sp)
	if got := seqs(t, &out); !slices.Equal(got, span(1, 10)) {
		t.Fatalf("emitted %v, want the 10 messages there at Open", got)
	}
}

// TestJetStreamWithoutURLConnectsAsItsWorker: a source given no URL uses
// the worker's (TaskContext.NATSURL), as cluster workers pass it.
func TestJetStreamWithoutURLConnectsAsItsWorker(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 5)
	cfg := s.config()
	cfg.URL = ""
	tc := taskContext(0, 1, "at-least-once")
	tc.NATSURL = s.srv.URL()
	var out collector
	sp := sources.NewJetStream(cfg)
	open(t, sp, tc, &out)
	drain(t, sp)
	checkClose(t, sp)
	if got := seqs(t, &out); !slices.Equal(got, span(1, 5)) {
		t.Fatalf("emitted %v, want the 5 messages", got)
	}
}

func TestJetStreamUnboundedWaitsForNewMessages(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	cfg := s.config()
	cfg.StopAtEnd = false
	var out collector
	sp := sources.NewJetStream(cfg)
	open(t, sp, taskContext(0, 1, "at-least-once"), &out)
	defer sp.Close()
	start := time.Now()
	nextOnce(t, sp)
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second || len(out.recs) > 0 {
		t.Fatalf("an empty Next took %v and emitted %d; want about MaxWait (100ms) and nothing", d, len(out.recs))
	}
	s.publish(t, 5)
	for deadline := time.Now().Add(5 * time.Second); len(out.recs) < 5 && time.Now().Before(deadline); {
		nextOnce(t, sp)
	}
	if got := seqs(t, &out); !slices.Equal(got, span(1, 5)) {
		t.Fatalf("emitted %v, want 1..5", got)
	}
}

// TestJetStreamRemakesALostConsumer deletes the spout's consumer behind
// its back, as a server restart does to a consumer kept in memory: the
// spout makes it again at its position and loses nothing.
func TestJetStreamRemakesALostConsumer(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 50)
	cfg := s.config()
	cfg.PerNext = 10
	var out collector
	sp := sources.NewJetStream(cfg)
	open(t, sp, taskContext(0, 1, "at-least-once"), &out)
	nextOnce(t, sp)
	stream, err := s.js.Stream(t.Context(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(t.Context())
	deleted := 0
	for name := range names.Name() {
		if err := stream.DeleteConsumer(t.Context(), name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted != 1 {
		t.Fatalf("deleted %d consumers, want the spout's one", deleted)
	}
	drain(t, sp)
	checkClose(t, sp)
	if got := seqs(t, &out); !slices.Equal(got, span(1, 50)) {
		t.Fatalf("emitted %v, want 1..50 once each", got)
	}
}

// TestJetStreamDurableResumesAfterAcked: the first spout acks 1..4,
// dead-letters 5 and closes with 6..10 in flight; a second spout on the
// same durable consumer gets 6..20 and nothing before.
func TestJetStreamDurableResumesAfterAcked(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 20)
	cfg := s.config()
	cfg.Durable = "orders-spout"
	cfg.PerNext = 10
	tc := taskContext(0, 1, "at-least-once")

	var out collector
	first := sources.NewJetStream(cfg)
	open(t, first, tc, &out)
	nextOnce(t, first)
	if got := seqs(t, &out); !slices.Equal(got, span(1, 10)) {
		t.Fatalf("first spout emitted %v, want 1..10", got)
	}
	for k := int64(1); k <= 4; k++ {
		first.Ack(topology.MsgID{Offset: k})
	}
	first.DeadLettered(topology.MsgID{Offset: 5}, "poison")
	first.Fail(topology.MsgID{Offset: 6}) // the runtime replays; the server must not
	waitAckFloor(t, s, cfg.Durable, 5)
	checkClose(t, first)

	out = collector{}
	second := sources.NewJetStream(cfg)
	open(t, second, tc, &out)
	drain(t, second)
	if got := sorted(seqs(t, &out)); !slices.Equal(got, span(6, 20)) {
		t.Fatalf("second spout emitted %v, want 6..20", got)
	}
	for _, k := range out.offsets() {
		second.Ack(topology.MsgID{Offset: k})
	}
	waitAckFloor(t, s, cfg.Durable, 20)
	checkClose(t, second)
}

func waitAckFloor(t *testing.T, s *jsServer, durable string, want uint64) {
	t.Helper()
	cons, err := s.js.Consumer(t.Context(), "ORDERS", durable)
	if err != nil {
		t.Fatal(err)
	}
	var floor uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if floor = info.AckFloor.Stream; floor == want {
			return
		}
	}
	t.Fatalf("the consumer's ack floor is %d, want %d", floor, want)
}

func TestJetStreamDurableTermsRefusedRecords(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	s.publish(t, 5)
	cfg := s.config()
	cfg.Durable = "refusing"
	out := collector{refuse: func(id topology.MsgID) bool { return id.Offset == 3 }}
	sp := sources.NewJetStream(cfg)
	open(t, sp, taskContext(0, 1, "at-least-once"), &out)
	drain(t, sp)
	for _, k := range out.offsets() {
		sp.Ack(topology.MsgID{Offset: k})
	}
	waitAckFloor(t, s, cfg.Durable, 5)
	checkClose(t, sp)
}

func TestJetStreamDurableHasNoPosition(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	cfg := s.config()
	cfg.Durable = "d"
	sp := sources.NewJetStream(cfg)
	open(t, sp, taskContext(0, 1, "at-least-once"), &collector{})
	defer sp.Close()
	if _, err := sp.Position(); err == nil || !strings.Contains(err.Error(), "cannot rewind") {
		t.Fatalf("Position in durable mode: %v", err)
	}
	if err := sp.Seek([]byte{1}); err == nil || !strings.Contains(err.Error(), "cannot rewind") {
		t.Fatalf("Seek in durable mode: %v", err)
	}
}

func TestJetStreamOpenErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	if _, err := s.js.CreateOrUpdateConsumer(t.Context(), "ORDERS", jetstream.ConsumerConfig{Durable: "noacks", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	url := s.srv.URL()
	for _, tc := range []struct {
		name      string
		cfg       sources.JetStreamConfig
		guarantee string
		want      string
	}{
		{"no URL", sources.JetStreamConfig{Stream: "ORDERS"}, "at-least-once", "URL is empty"},
		{"no stream", sources.JetStreamConfig{URL: url}, "at-least-once", "is not a stream name"},
		{"bad durable", sources.JetStreamConfig{URL: url, Stream: "ORDERS", Durable: "a.b"}, "at-least-once", "is not a consumer name"},
		{"missing stream", sources.JetStreamConfig{URL: url, Stream: "NOPE"}, "at-least-once", `stream "NOPE" does not exist`},
		{"unreachable server", sources.JetStreamConfig{URL: "nats://127.0.0.1:1", Stream: "ORDERS"}, "at-least-once", "cannot connect to NATS"},
		{"durable with exactly-once", sources.JetStreamConfig{URL: url, Stream: "ORDERS", Durable: "d"}, "exactly-once", "cannot rewind"},
		{"durable without acks", sources.JetStreamConfig{URL: url, Stream: "ORDERS", Durable: "noacks"}, "at-least-once", "needs explicit acks"},
		{"durable with another filter", sources.JetStreamConfig{URL: url, Stream: "ORDERS", Durable: "filtered", Subjects: []string{"orders.1"}}, "at-least-once", "filters subjects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "durable with another filter" {
				cfg := tc.cfg
				cfg.Subjects = nil
				sp := sources.NewJetStream(cfg) // creates it unfiltered
				open(t, sp, taskContext(0, 1, "at-least-once"), &collector{})
				checkClose(t, sp)
			}
			sp := sources.NewJetStream(tc.cfg)
			err := sp.Open(taskContext(0, 1, tc.guarantee), &collector{})
			sp.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sources: ") {
				t.Fatalf("Open = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// Without a URL of its own the spout uses the worker's connection, and
	// the error names that server rather than an empty string.
	tcx := taskContext(0, 1, "at-least-once")
	tcx.NATSURL = url
	sp := sources.NewJetStream(sources.JetStreamConfig{Stream: "NOPE"})
	err := sp.Open(tcx, &collector{})
	sp.Close()
	if want := `stream "NOPE" does not exist on nats://127.0.0.1:`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open on the worker's connection = %v, want an error saying %q", err, want)
	}
}

// ordersIntoSink reads the stream with two JetStream spout tasks into
// two tasks of sink.
func ordersIntoSink(t *testing.T, cfg sources.JetStreamConfig, sink *flowtest.Sink) *topology.Topology {
	t.Helper()
	b := topology.NewBuilder("orders")
	b.Spout("orders", func() topology.Spout { return sources.NewJetStream(cfg) }, 2).Outputs("subject", "data")
	b.Bolt("sink", sink.Bolt, 2).Input("orders", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestJetStreamDurableRunsAtMostOnce: a durable consumer keeps its
// progress on the server and has no position (topology.ErrNoPosition);
// at most once the runtime, which writes the positions of rewindable
// spouts before they send, must run it without one. It failed every
// spout task at start ("Position: ... cannot rewind") before.
func TestJetStreamDurableRunsAtMostOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	const n = 500
	s.publish(t, n)
	cfg := s.config()
	cfg.Durable = "amo"
	sink := flowtest.NewSink()
	if _, err := flowtest.Run(context.Background(), ordersIntoSink(t, cfg, sink), flowtest.Options{Guarantee: workers.AtMostOnce}); err != nil {
		t.Fatal(err)
	}
	if got := len(sink.Values()); got != n {
		t.Fatalf("the sink got %d messages, want %d", got, n)
	}
	waitAckFloor(t, s, cfg.Durable, n)
}

// TestJetStreamRunAtLeastOnce runs both modes through the runtime with
// two tasks, frames lost and first deliveries failed, and checks every
// message reached the sink.
func TestJetStreamRunAtLeastOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := startJetStream(t)
	defer s.Shutdown()
	const n = 3000
	s.publish(t, n)
	for _, durable := range []string{"", "runner"} {
		cfg := s.config()
		cfg.Durable = durable
		sink := flowtest.NewSink().FailFirst(0.02)
		sum, err := flowtest.Run(context.Background(), ordersIntoSink(t, cfg, sink), flowtest.Options{Guarantee: workers.AtLeastOnce})
		if err != nil {
			t.Fatalf("durable %q: %v", durable, err)
		}
		seen := map[string]bool{}
		for _, v := range sink.Values() {
			seen[string(v[1].([]byte))] = true
		}
		for k := 1; k <= n; k++ {
			if !seen[fmt.Sprintf("m%d", k)] {
				t.Fatalf("durable %q: message %d never reached the sink", durable, k)
			}
		}
		if len(seen) != n || sink.Failures() == 0 {
			t.Fatalf("durable %q: the sink saw %d different messages (want %d) and failed %d", durable, len(seen), n, sink.Failures())
		}
		if durable != "" {
			waitAckFloor(t, s, durable, n)
		} else if got := sum.Component("orders").Emitted; got != n {
			t.Fatalf("the spouts emitted %d records, want %d", got, n)
		}
	}
}
