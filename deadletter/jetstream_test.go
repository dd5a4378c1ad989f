package deadletter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/deadletter/sinktest"
	"github.com/ackflow/ackflow/embednats/natstest"
)

func TestJetStreamNames(t *testing.T) {
	js := startJetStream(t)
	s, err := deadletter.NewJetStream(t.Context(), js, "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Stream() != "ackflow_wordcount_dlq" || s.Subject() != "ackflow.wordcount.dlq" {
		t.Fatalf("stream %q subject %q, want ackflow_wordcount_dlq on ackflow.wordcount.dlq", s.Stream(), s.Subject())
	}
	info, err := js.Stream(t.Context(), s.Stream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	if cfg.Storage != jetstream.FileStorage || cfg.Retention != jetstream.LimitsPolicy || len(cfg.Subjects) != 1 || cfg.Subjects[0] != s.Subject() {
		t.Fatalf("stream config %+v, want file storage, limits retention, subject %s", cfg, s.Subject())
	}
	// A second run of the topology reuses the stream, without a create or
	// update: every worker opens it on each generation it joins, and
	// those requests get no answer while a NATS cluster re-elects its
	// JetStream meta leader.
	writes := natstest.MetaRequests(t, js)
	again, err := deadletter.NewJetStream(t.Context(), js, "wordcount")
	if err != nil {
		t.Fatalf("opening the stream again: %v", err)
	}
	again.Close()
	if n := writes(); n != 0 {
		t.Errorf("opening the stream again sent %d create or update requests, want none", n)
	}
}

func TestJetStreamRefusesANameNATSCannotUse(t *testing.T) {
	for _, name := range []string{"", "a.b", "a b", "a*", "a>", "a/b"} {
		// No server: the name is refused before any request.
		_, err := deadletter.NewJetStream(t.Context(), nil, name)
		if err == nil || !strings.Contains(err.Error(), "cannot name a NATS stream") {
			t.Errorf("topology %q: got %v, want a refusal", name, err)
		}
	}
}

// A Put retried after a lost acknowledgement must not store the letter
// twice; a later attempt of the same record is a new letter.
func TestJetStreamDedupsARetriedPut(t *testing.T) {
	js := startJetStream(t)
	s, err := deadletter.NewJetStream(t.Context(), js, "dedup")
	if err != nil {
		t.Fatal(err)
	}
	l := sinktest.SampleLetter(42, "x")
	for range 2 {
		if err := s.Put(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	if n := messages(t, js, s.Stream()); n != 1 {
		t.Fatalf("a retried Put left %d messages, want 1", n)
	}
	l.Attempts++
	if err := s.Put(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	if n := messages(t, js, s.Stream()); n != 2 {
		t.Fatalf("another attempt of the record left %d messages, want 2", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if js.Conn().IsClosed() {
		t.Fatal("Close closed the caller's connection")
	}
}

func messages(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestReadJetStreamOfMissingStream(t *testing.T) {
	js := startJetStream(t)
	_, err := deadletter.ReadJetStream(t.Context(), js, "neverran")
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "ackflow_neverran_dlq") {
		t.Fatalf("got %v, want an error naming the stream and wrapping ErrStreamNotFound", err)
	}
}

// A bad message is named by its sequence so that it can be removed.
func TestReadJetStreamNamesABadMessage(t *testing.T) {
	js := startJetStream(t)
	s, err := deadletter.NewJetStream(t.Context(), js, "bad")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(t.Context(), sinktest.SampleLetter(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), s.Subject(), []byte("{oops")); err != nil {
		t.Fatal(err)
	}
	_, err = deadletter.ReadJetStream(t.Context(), js, "bad")
	if err == nil || !strings.Contains(err.Error(), "message 2 of stream ackflow_bad_dlq is not a letter") {
		t.Fatalf("got %v, want an error naming message 2", err)
	}
}

// More letters than one pull brings are all read, in order, and the reader
// leaves no consumer behind.
func TestReadJetStreamReadsEveryLetterOnce(t *testing.T) {
	const n = 1200
	js := startJetStream(t)
	s, err := deadletter.NewJetStream(t.Context(), js, "many")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id := range uint64(n) {
		if err := s.Put(t.Context(), sinktest.SampleLetter(id)); err != nil {
			t.Fatal(err)
		}
	}
	letters, err := deadletter.ReadJetStream(t.Context(), js, "many")
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != n {
		t.Fatalf("read %d letters, want %d", len(letters), n)
	}
	for i, l := range letters {
		if l.RecordID != uint64(i) {
			t.Fatalf("letter %d is record %d", i, l.RecordID)
		}
	}
	st, err := js.Stream(t.Context(), s.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("the reader left %d consumers on the stream", info.State.Consumers)
	}
}
