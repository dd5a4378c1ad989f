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
