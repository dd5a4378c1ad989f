package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is a Sink that publishes letters to a JetStream stream, one
// stream per topology, so that the dead letters of a cluster run are in one
// place that every worker can reach and that outlives the workers.
type JetStream struct {
	js      jetstream.JetStream
	stream  string
	subject string
	closed  atomic.Bool
}

// NewJetStream creates the dead-letter stream of topology, or updates it to
// this configuration if it exists: ackflow_<topology>_dlq on the subject
// ackflow.<topology>.dlq, file storage, kept until removed by hand. The
// caller keeps ownership of js and its connection.
func NewJetStream(ctx context.Context, js jetstream.JetStream, topology string) (*JetStream, error) {
	stream, subject, err := names(topology)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.StreamConfig{
		Name:        stream,
		Description: "ackflow dead letters of topology " + topology,
		Subjects:    []string{subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
	}
	// Bind first, write only when needed: every worker opens the stream
	// each time it joins a generation, and while a NATS cluster re-elects
	// its JetStream meta leader (a server restarted) a create or update
	// gets no answer until its timeout, whereas the stream's info, which
	// the stream's own leader answers, does. The bind gets bindTimeout of
	// its own (a stream being created may have no leader yet), and then
	// the create or update settles it.
	bctx, cancel := context.WithTimeout(ctx, bindTimeout)
	s, err := js.Stream(bctx, stream)
	cancel()
	if err != nil || !sameStream(s.CachedInfo().Config, cfg) {
		_, err = js.CreateOrUpdateStream(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: cannot create or update stream %s: %w; check that the NATS server has JetStream enabled and that the account may create streams", stream, err)
	}
	return &JetStream{js: js, stream: stream, subject: subject}, nil
}

// bindTimeout bounds binding to the stream before NewJetStream falls back
// to creating or updating it.
const bindTimeout = 2 * time.Second

// sameStream reports whether an existing stream has what cfg sets.
func sameStream(have, cfg jetstream.StreamConfig) bool {
	return have.Description == cfg.Description && slices.Equal(have.Subjects, cfg.Subjects) && have.Storage == cfg.Storage && have.Retention == cfg.Retention
}

// names are the stream and subject of topology's dead letters. The topology
// builder allows only letters, digits, '-' and '_'; this checks just what
// NATS itself refuses, so that a name from elsewhere fails with a clear error.
func names(topology string) (stream, subject string, err error) {
	if topology == "" || strings.ContainsAny(topology, ".*> \t\r\n/\\") {
		return "", "", fmt.Errorf("deadletter: topology name %q cannot name a NATS stream; use letters, digits, '-' and '_'", topology)
	}
	return "ackflow_" + topology + "_dlq", "ackflow." + topology + ".dlq", nil
}

// Stream is the name of the JetStream stream.
func (s *JetStream) Stream() string { return s.stream }

// Subject is the subject letters are published to.
func (s *JetStream) Subject() string { return s.subject }

// Put publishes l and waits for the server to store it. The message ID is
// the record, its attempt count and the letter's time, so a Put of the same
// letter retried after a lost acknowledgement is dropped by the server's
// duplicate window (two minutes by default) instead of storing it twice,
// while a re-injected record that fails again is a new letter.
func (s *JetStream) Put(ctx context.Context, l Letter) error {
	if s.closed.Load() {
		return ErrClosed
	}
	b, err := encode(l)
	if err != nil {
		return err
	}
	_, err = s.js.Publish(ctx, s.subject, b, jetstream.WithMsgID(msgID(l)))
	if err != nil {
		return fmt.Errorf("deadletter: publishing the letter of record %016x to %s: %w; retry the Put (the server drops a duplicate)", l.RecordID, s.subject, err)
	}
	return nil
}

func msgID(l Letter) string {
	return fmt.Sprintf("%016x-%d-%d", l.RecordID, l.Attempts, l.Time.UnixNano())
}

// Close makes later Puts fail. It leaves the caller's connection open.
func (s *JetStream) Close() error {
	s.closed.Store(true)
	return nil
}

// ReadJetStream reads every letter in topology's dead-letter stream once,
// oldest first, and returns. Letters published while it reads may or may
// not be included.
func ReadJetStream(ctx context.Context, js jetstream.JetStream, topology string) ([]Letter, error) {
	stream, _, err := names(topology)
	if err != nil {
		return nil, err
	}
	last, err := lastSeq(ctx, js, stream, topology)
	if err != nil || last == 0 {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("deadletter: cannot read stream %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("deadletter: cannot read stream %s: %w", stream, err)
	}
	defer func() {
		it.Stop()
		deleteConsumer(js, stream, cons)
	}()
	return readUpTo(ctx, it, stream, last)
}

// lastSeq is the sequence of the newest letter in stream, 0 if it is empty.
func lastSeq(ctx context.Context, js jetstream.JetStream, stream, topology string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("deadletter: no stream %s on this server: topology %q never ran with JetStream dead letters here; check the topology name and the server: %w", stream, topology, err)
	}
	if err != nil {
		return 0, fmt.Errorf("deadletter: cannot look up stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("deadletter: cannot look up stream %s: %w", stream, err)
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	return info.State.LastSeq, nil
}

// readUpTo decodes messages until the one at sequence last, or the last one
// there is: stopping at a known sequence is what makes a read of a stream
// that keeps growing return.
func readUpTo(ctx context.Context, it jetstream.MessagesContext, stream string, last uint64) ([]Letter, error) {
	var letters []Letter
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("deadletter: reading stream %s: %w", stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("deadletter: reading stream %s: %w", stream, err)
		}
		var l Letter
		if err := json.Unmarshal(msg.Data(), &l); err != nil {
			return nil, fmt.Errorf("deadletter: message %d of stream %s is not a letter: %w; look at it with `nats stream get %s %d`, and remove it with `nats stream rmm` to read the others",
				meta.Sequence.Stream, stream, err, stream, meta.Sequence.Stream)
		}
		letters = append(letters, l)
		if meta.NumPending == 0 || meta.Sequence.Stream >= last {
			return letters, nil
		}
	}
}

// deleteConsumer removes the reader's ephemeral consumer now rather than
// after the server's inactivity threshold. It is best effort, as the server
// removes it anyway, and has its own deadline because the reader's context
// may be what ended the read.
func deleteConsumer(js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}
