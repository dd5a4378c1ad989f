package embednats

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestStartPublishSubscribe(t *testing.T) {
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(2 * time.Second)
	if err != nil || string(m.Data) != "hello" {
		t.Fatalf("got %v, %v", m, err)
	}
}

func TestBadAddress(t *testing.T) {
	if _, err := Start(Config{Addr: "nonsense"}); err == nil {
		t.Fatal("want an error for a bad address")
	}
}

// TestSecuredServer: a server with a token refuses clients without it, and
// half a TLS or password configuration is refused at start.
func TestSecuredServer(t *testing.T) {
	srv, err := Start(Config{Token: "t0ken", NoJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	if nc, err := nats.Connect(srv.URL()); err == nil {
		nc.Close()
		t.Fatal("a client without the token connected")
	}
	nc, err := nats.Connect(srv.URL(), nats.Token("t0ken"))
	if err != nil {
		t.Fatalf("the token was refused: %v", err)
	}
	nc.Close()
	for _, bad := range []Config{{User: "u"}, {User: "u", Password: "p", Token: "t"}, {TLSCert: "c.pem"}, {TLSCA: "ca.pem"}, {TLSCert: "/nonexistent.pem", TLSKey: "/nonexistent-key.pem"}} {
		if s, err := Start(bad); err == nil {
			s.Shutdown()
			t.Errorf("Start(%+v) started", bad)
		}
	}
}
