package workers

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestLocalRunConnectsThroughMemory: a local run that starts its own
// server connects to it through memory (docs/performance.md, round
// twenty), with the caller's options after; one given NATSURL keeps the
// caller's options and so its socket.
func TestLocalRunConnectsThroughMemory(t *testing.T) {
	mine := nats.Name("caller's option")
	url, opts, shutdown, err := natsFor(Config{NATSOptions: []nats.Option{mine}})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown()
	if len(opts) != 2 {
		t.Fatalf("%d options, want the in-process one and the caller's", len(opts))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if addr := nc.ConnectedAddr(); addr != "pipe" {
		t.Fatalf("a local run's connection goes to %q, want an in-memory pipe", addr)
	}
	if got := nc.Opts.Name; got != "caller's option" {
		t.Fatalf("the caller's options were not kept: name %q", got)
	}

	url2, opts2, shutdown2, err := natsFor(Config{NATSURL: url, NATSOptions: []nats.Option{mine}})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown2()
	nc2, err := nats.Connect(url2, opts2...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	if addr := nc2.ConnectedAddr(); addr == "pipe" {
		t.Fatal("a run given NATSURL connected through memory; it must use the URL")
	}
}
