package sinks

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// startNATS starts a JetStream server with stream OUT on out.> and the
// given duplicate window, closed when the test ends. Tests that check for
// leaked goroutines register that check with t.Cleanup before calling it,
// so that it runs once the server is down.
func startNATS(t *testing.T, window time.Duration) (*embednats.Server, jetstream.JetStream) {
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
	if err == nil {
		_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Duplicates: window})
	}
	t.Cleanup(srv.Shutdown)
	t.Cleanup(nc.Close)
	if err != nil {
		t.Fatal(err)
	}
	return srv, js
}

// prepared returns a JetStream sink of cfg prepared as a task without
// checkpoints, and the collector its inputs are acked and failed on.
func prepared(t *testing.T, cfg JetStreamConfig) (*JetStream, *collector) {
	t.Helper()
	c := newCollector()
	s := NewJetStream(cfg)().(*JetStream)
	mustOK(t, s.Prepare(taskContext(0, time.Second), c))
	return s, c
}

func taskContext(every, timeout time.Duration) topology.TaskContext {
	return topology.TaskContext{Component: "out", CheckpointEvery: every, MessageTimeout: timeout, Logger: zerolog.Nop()}
}

// settleAll flushes s until every input is acked or failed.
func settleAll(t *testing.T, s *JetStream, c *collector, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.Flush()
		acked, failed := c.counts()
		if acked+failed == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s %d inputs acked and %d failed, of %d", acked, failed, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJetStreamAcksWhenStoredAndDropsRepeatedIDs(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, time.Minute)
	s, c := prepared(t, JetStreamConfig{URL: srv.URL(), Subject: "out.records", MaxInFlight: 4})
	if s.cfg.Stream != "OUT" {
		t.Fatalf("the stream of out.records is %q, want OUT", s.cfg.Stream)
	}
	const n = 100
	for i := range uint64(n) {
		s.Execute(tuple(i%50, int64(i%50), "x")) // each ID twice
		if len(s.pending) > 4 {
			t.Fatalf("%d publishes pending, more than MaxInFlight 4", len(s.pending))
		}
	}
	mustOK(t, s.Cleanup())
	if acked, failed := c.counts(); acked != n || failed != 0 {
		t.Fatalf("%d acked and %d failed, want %d acked", acked, failed, n)
	}
	st, err := js.Stream(context.Background(), "OUT")
	mustOK(t, err)
	if got := st.CachedInfo().State.Msgs; got != 50 {
		t.Fatalf("the stream holds %d messages for 50 distinct IDs", got)
	}
	m, err := st.GetMsg(context.Background(), 1)
	mustOK(t, err)
	if id := m.Header.Get(jetstream.MsgIDHeader); id != msgID(0, "out.records", m.Data) || !strings.HasPrefix(id, "0000000000000000-") || string(m.Data) != `[0,"x"]` {
		t.Fatalf("first message: Nats-Msg-Id %q, body %s", id, m.Data)
	}
}

// A record reprocessed after a rollback may carry another body under the
// same ID (a running count reached in another order): the stream stores
// it, where an ID alone would have dropped the newer value as a duplicate.
func TestJetStreamStoresAReplayWithAnotherBody(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, time.Minute)
	s, c := prepared(t, JetStreamConfig{URL: srv.URL(), Subject: "out.records"})
	// Record 7 says (w, 1), is replayed with the same body, then
	// reprocessed into (w, 2); record 8 says (w, 1) first.
	for _, in := range []struct {
		id uint64
		n  int64
	}{{7, 1}, {7, 1}, {8, 1}, {7, 2}} {
		s.Execute(tuple(in.id, in.n, "w"))
	}
	mustOK(t, s.Cleanup())
	if acked, failed := c.counts(); acked != 4 || failed != 0 {
		t.Fatalf("%d acked and %d failed, want 4 acked", acked, failed)
	}
	st, err := js.Stream(context.Background(), "OUT")
	mustOK(t, err)
	var bodies []string
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		mustOK(t, err)
		bodies = append(bodies, string(m.Data))
	}
	if want := []string{`[1,"w"]`, `[1,"w"]`, `[2,"w"]`}; !slices.Equal(bodies, want) {
		t.Fatalf("the stream holds %q; want %q (record 7's same body once, its new body too)", bodies, want)
	}
}

func TestJetStreamRefusesAShortDuplicateWindow(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, _ := startNATS(t, time.Minute)
	s := NewJetStream(JetStreamConfig{URL: srv.URL(), Subject: "out.x"})().(*JetStream)
	err := s.Prepare(taskContext(time.Minute, 30*time.Second), newCollector())
	for _, want := range []string{`"OUT"`, "within 1m0s", "1m30s", "nats stream edit OUT --dupe-window 3m", "StreamConfig.Duplicates"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Prepare with a 1m window, 1m checkpoints and a 30s timeout: %v; want it to say %q", err, want)
		}
	}
	mustOK(t, s.Cleanup())
	ok := NewJetStream(JetStreamConfig{URL: srv.URL(), Subject: "out.x"})().(*JetStream)
	mustOK(t, ok.Prepare(taskContext(20*time.Second, 30*time.Second), newCollector()))
	mustOK(t, ok.Cleanup())
}

func TestCheckDupeWindow(t *testing.T) {
	for _, tc := range []struct {
		window, every, timeout time.Duration
		ok                     bool
	}{
		{time.Minute, 0, time.Hour, true}, // no checkpoints: no rollback
		{2 * time.Minute, time.Minute, 30 * time.Second, true},
		{90 * time.Second, time.Minute, 30 * time.Second, false}, // must be longer
		{time.Second, time.Minute, 0, false},
	} {
		err := checkDupeWindow("OUT", tc.window, tc.every, tc.timeout)
		if (err == nil) != tc.ok {
			t.Errorf("window %v, checkpoints every %v, timeout %v: %v", tc.window, tc.every, tc.timeout, err)
		}
	}
}

func TestJetStreamPrepareRefusesAMissingStream(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, _ := startNATS(t, time.Minute)
	for _, tc := range []struct {
		cfg  JetStreamConfig
		want string
	}{
		{JetStreamConfig{Subject: "elsewhere"}, `no JetStream stream captures subject "elsewhere"`},
		{JetStreamConfig{Subject: "out.x", Stream: "OTHER"}, `belongs to stream "OUT", not "OTHER"`},
		{JetStreamConfig{SubjectOf: func(*topology.Tuple) string { return "x" }, Stream: "NOPE"}, `stream "NOPE" does not exist`},
		{JetStreamConfig{SubjectOf: func(*topology.Tuple) string { return "x" }}, "no Stream"},
	} {
		tc.cfg.URL = srv.URL()
		s := NewJetStream(tc.cfg)().(*JetStream)
		err := s.Prepare(taskContext(0, time.Second), newCollector())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Prepare(%+v): %v; want %q", tc.cfg, err, tc.want)
		}
		mustOK(t, s.Cleanup())
	}
}

func TestJetStreamFailsInputsWhenTheStreamIsDeleted(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, time.Minute)
	s, c := prepared(t, JetStreamConfig{URL: srv.URL(), Subject: "out.x"})
	mustOK(t, js.DeleteStream(context.Background(), "OUT"))
	for i := range uint64(20) {
		s.Execute(tuple(i, "x"))
	}
	settleAll(t, s, c, 20)
	if acked, _ := c.counts(); acked != 0 {
		t.Fatalf("%d inputs acked although their stream is gone", acked)
	}
	if err := c.anyFailure(); !errors.Is(err, jetstream.ErrNoStreamResponse) || !strings.Contains(err.Error(), "stream OUT exists") {
		t.Fatalf("the failure reason: %v", err)
	}
	mustOK(t, s.Cleanup())
}

func TestJetStreamFailsInputsNoStreamCaptures(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, _ := startNATS(t, time.Minute)
	c := newCollector()
	subject := func(in *topology.Tuple) string {
		if in.ID%2 == 0 {
			return "out.even"
		}
		return "nowhere.odd"
	}
	s := NewJetStream(JetStreamConfig{URL: srv.URL(), SubjectOf: subject, Stream: "OUT"})().(*JetStream)
	mustOK(t, s.Prepare(taskContext(0, time.Second), c))
	for i := range uint64(10) {
		s.Execute(tuple(i, "x"))
	}
	settleAll(t, s, c, 10)
	if acked, failed := c.counts(); acked != 5 || failed != 5 {
		t.Fatalf("%d acked and %d failed; want the 5 odd records, which no stream captures, failed", acked, failed)
	}
	if err := c.anyFailure(); !strings.Contains(err.Error(), `"nowhere.odd"`) {
		t.Fatalf("the failure reason does not name the subject: %v", err)
	}
	mustOK(t, s.Cleanup())
}

func TestJetStreamCleanupReportsFailedPublishes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, time.Minute)
	s, c := prepared(t, JetStreamConfig{URL: srv.URL(), Subject: "out.x"})
	mustOK(t, js.DeleteStream(context.Background(), "OUT"))
	for i := range uint64(5) {
		s.Execute(tuple(i, "x"))
	}
	err := s.Cleanup()
	if err == nil || !strings.Contains(err.Error(), "5 publishes failed") {
		t.Fatalf("Cleanup after 5 failed publishes: %v", err)
	}
	if acked, failed := c.counts(); acked != 0 || failed != 5 {
		t.Fatalf("%d acked and %d failed, want 5 failed", acked, failed)
	}
}

func TestMsgID(t *testing.T) {
	for id, want := range map[uint64]string{0: "0000000000000000-", 0xabc: "0000000000000abc-", 1<<64 - 1: "ffffffffffffffff-"} {
		got := msgID(id, "out", []byte("x"))
		if !strings.HasPrefix(got, want) || len(got) != 33 || strings.Trim(got[17:], "0123456789abcdef") != "" {
			t.Errorf("msgID(%#x) = %q, want %q and 16 hex digits", id, got, want)
		}
		if recordID(id) != want[:16] {
			t.Errorf("recordID(%#x) = %q, want %q", id, recordID(id), want[:16])
		}
	}
	same := msgID(1, "out", []byte("[1]"))
	for _, other := range []string{msgID(1, "out", []byte("[2]")), msgID(1, "out2", []byte("[1]")), msgID(1, "ou", []byte("t[1]")), msgID(2, "out", []byte("[1]"))} {
		if other == same {
			t.Errorf("%q is the ID of another message too", same)
		}
	}
	if again := msgID(1, "out", []byte("[1]")); again != same {
		t.Errorf("the same message got IDs %q and %q", same, again)
	}
}

func TestJetStreamCleanupFailsUnansweredPublishes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, time.Minute)
	s, c := prepared(t, JetStreamConfig{URL: srv.URL(), Subject: "out.x", CloseTimeout: time.Millisecond})
	// Without a stream the client retries for about half a second before
	// it gives up: longer than CloseTimeout.
	mustOK(t, js.DeleteStream(context.Background(), "OUT"))
	for i := range uint64(3) {
		s.Execute(tuple(i, "x"))
	}
	err := s.Cleanup()
	if err == nil || !strings.Contains(err.Error(), "3 publishes to stream OUT unanswered after 1ms") {
		t.Fatalf("Cleanup with 3 publishes unanswered: %v", err)
	}
	if acked, failed := c.counts(); acked != 0 || failed != 3 {
		t.Fatalf("%d acked and %d failed, want 3 failed", acked, failed)
	}
}

// streamMsgs returns the bodies in stream OUT, in order.
func streamMsgs(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	st, err := js.Stream(context.Background(), "OUT")
	mustOK(t, err)
	info, err := st.Info(context.Background())
	mustOK(t, err)
	var out []string
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		mustOK(t, err)
		out = append(out, string(m.Data))
	}
	return out
}

// TestJetStreamWritesAheadUnderExactlyOnce: with exactly-once checkpoints
// an output reaches the stream only when its epoch commits; a task that
// restores a checkpoint publishes what it held, and what came after the
// checkpoint is gone, so a record that a replay gives another value is in
// the stream once, with the value of the epoch that committed it.
func TestJetStreamWritesAheadUnderExactlyOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after startNATS's cleanups
	srv, js := startNATS(t, 10*time.Minute)
	tc := taskContext(time.Second, time.Second)
	tc.Guarantee = "exactly-once"
	c := newCollector()
	s := NewJetStream(JetStreamConfig{URL: srv.URL(), Subject: "out.records"})().(*JetStream)
	mustOK(t, s.Prepare(tc, c))
	s.Execute(tuple(1, 1, "a"))
	s.Execute(tuple(2, 2, "b"))
	if acked, _ := c.counts(); acked != 2 {
		t.Fatalf("%d inputs acked, want both at once", acked)
	}
	if got := streamMsgs(t, js); len(got) != 0 {
		t.Fatalf("published before the checkpoint: %v", got)
	}
	snap, err := s.Snapshot() // checkpoint 1
	mustOK(t, err)
	mustOK(t, s.PreCommit(1))
	s.Execute(tuple(3, 3, "c")) // after checkpoint 1: lost in the crash below
	mustOK(t, s.Commit(1))
	if got := streamMsgs(t, js); len(got) != 2 {
		t.Fatalf("after commit 1 the stream holds %v, want the two records of epoch 1", got)
	}
	mustOK(t, s.Cleanup())

	// The process dies before committing epoch 2, which held record 3;
	// its replay computes another value. A checkpoint taken before commit 1
	// is restored too: publishing epoch 1 again changes nothing.
	s2 := NewJetStream(JetStreamConfig{URL: srv.URL(), Subject: "out.records"})().(*JetStream)
	mustOK(t, s2.Prepare(tc, newCollector()))
	mustOK(t, s2.Restore(snap))
	mustOK(t, s2.Recover(1))
	s2.Execute(tuple(3, 30, "c again"))
	mustOK(t, s2.PreCommit(2))
	mustOK(t, s2.Commit(2))
	mustOK(t, s2.Cleanup())
	got := streamMsgs(t, js)
	want := []string{`[1,"a"]`, `[2,"b"]`, `[30,"c again"]`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the stream holds %v, want %v", got, want)
	}
	if err := s2.Restore([]byte{9, 9}); err == nil {
		t.Fatal("a damaged snapshot was restored")
	}
}
