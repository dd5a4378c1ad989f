package sinks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ackflow/ackflow/embednats/natstest"
	"github.com/ackflow/ackflow/sinks"
)

// TestPublishAsyncWaitsWhileStalled publishes through a client that allows
// one unacknowledged message and gives a stalled publish up after a
// nanosecond: the client alone refuses publishes, PublishAsync stores
// every one.
func TestPublishAsyncWaitsWhileStalled(t *testing.T) {
	base, stop := natstest.JetStream(t)
	defer stop()
	js, err := jetstream.New(base.Conn(), jetstream.WithPublishAsyncMaxPending(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FEED", Subjects: []string{"feed"}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	stall := jetstream.WithStallWait(time.Nanosecond)
	refused := 0
	for range n {
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: "feed", Data: []byte("x")}, stall); errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("the client never refused a stalled publish; the test proves nothing")
	}
	<-js.PublishAsyncComplete()
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := sinks.PublishAsync(ctx, js, &nats.Msg{Subject: "feed", Data: []byte("x")}, stall); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the client alone refused %d of %d publishes", refused, n)
	if info.State.Msgs != n {
		t.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, n)
	}
}
