// Package natstest starts an embedded NATS server with JetStream for
// tests.
package natstest

import (
	"strings"
	"testing"

	"github.com/ackflow/ackflow/embednats"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream starts an embedded server with JetStream and connects to it;
// stop closes both. Tests that check for leaked goroutines defer stop
// after deferring goleak.VerifyNone, so that the check runs once the
// server is down.
func JetStream(tb testing.TB) (js jetstream.JetStream, stop func()) {
	tb.Helper()
	srv, err := embednats.Start(embednats.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		srv.Shutdown()
		tb.Fatal(err)
	}
	stop = func() {
		nc.Close()
		srv.Shutdown()
	}
	js, err = jetstream.New(nc)
	if err != nil {
		stop()
		tb.Fatal(err)
	}
	return js, stop
}

// MetaRequests watches the JetStream API on js's connection for the
// requests that only the JetStream meta leader answers: stream creates and
// updates, and consumer creates (a KV watch is a consumer). While a NATS
// cluster re-elects its meta leader, after a server restarted, such a
// request gets no answer at all. The function it returns says how many
// were sent since it was last called.
func MetaRequests(tb testing.TB, js jetstream.JetStream) func() int {
	tb.Helper()
	nc := js.Conn()
	sub, err := nc.SubscribeSync("$JS.API.>")
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sub.Unsubscribe() })
	return func() int {
		tb.Helper()
		// The server copies each request to sub before it answers the
		// flush's PING, and the client queues the copies in order.
		if err := nc.Flush(); err != nil {
			tb.Fatal(err)
		}
		n := 0
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				return n
			}
			for _, p := range []string{"$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE.", "$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE."} {
				if strings.HasPrefix(m.Subject, p) {
					n++
				}
			}
		}
	}
}
