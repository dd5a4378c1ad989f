// Package natstest starts an embedded NATS server with JetStream for
// tests.
package natstest

import (
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
