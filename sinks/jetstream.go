package sinks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamConfig configures a JetStream sink.
type JetStreamConfig struct {
	// URL of the NATS server; empty connects as the task's worker does
	// (TaskContext.NATSURL and NATSOptions), or to nats.DefaultURL.
	URL string
	// Options for the connection (credentials, TLS, reconnects).
	Options []nats.Option
	// Subject every input is published to. Set it or SubjectOf.
	Subject string
	// SubjectOf picks the subject per input. With it, set Stream too: the
	// sink cannot find the stream of subjects it does not know yet.
	SubjectOf func(*topology.Tuple) string
	// Stream is the stream the subjects belong to. Prepare checks that it
	// exists and, with Subject, that it captures Subject; when empty it is
	// the stream that captures Subject.
	Stream string
	// Encode renders an input as the message body (default JSONArray).
	Encode func(*topology.Tuple) ([]byte, error)
	// MaxInFlight bounds the publishes awaiting their PubAck (default
	// 1024); Execute waits when that many are pending.
	MaxInFlight int
	// AckTimeout fails a publish whose PubAck has not come in this long
	// (default 5s), so that a lost reply cannot hold an input forever.
	AckTimeout time.Duration
	// CloseTimeout bounds how long Cleanup waits for pending publishes
	// (default 10s).
	CloseTimeout time.Duration
}

// Defaults of JetStreamConfig.
const (
	DefaultMaxInFlight  = 1024
	DefaultAckTimeout   = 5 * time.Second
	DefaultCloseTimeout = 10 * time.Second
)

// prepareTimeout bounds the stream checks of Prepare.
const prepareTimeout = 10 * time.Second

func (c *JetStreamConfig) setDefaults() {
	if c.Encode == nil {
		c.Encode = JSONArray
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
}

// Validate reports a config that cannot work, with what to do. Zero values
// stand for the defaults.
func (c JetStreamConfig) Validate() error {
	switch {
	case c.Subject == "" && c.SubjectOf == nil:
		return errors.New("sinks: JetStreamConfig has neither Subject nor SubjectOf; set one")
	case c.Subject != "" && c.SubjectOf != nil:
		return errors.New("sinks: JetStreamConfig has both Subject and SubjectOf; keep one")
	case c.SubjectOf != nil && c.Stream == "":
		return errors.New("sinks: JetStreamConfig has SubjectOf but no Stream; name the stream its subjects belong to")
	case c.MaxInFlight < 0:
		return fmt.Errorf("sinks: JetStreamConfig.MaxInFlight %d is negative; use 0 for the default %d", c.MaxInFlight, DefaultMaxInFlight)
	case c.AckTimeout < 0 || c.CloseTimeout < 0:
		return errors.New("sinks: JetStreamConfig timeouts must not be negative; use 0 for the defaults")
	}
	return nil
}

var (
	_ topology.Bolt    = (*JetStream)(nil)
	_ topology.Flusher = (*JetStream)(nil)
)

// NewJetStream returns a bolt factory for the builder. Every task opens its
// own connection.
func NewJetStream(cfg JetStreamConfig) func() topology.Bolt {
	return func() topology.Bolt { return &JetStream{cfg: cfg} }
}

// JetStream is a sink that publishes every input to a JetStream stream with
// the header Nats-Msg-Id set to the record's ID and a hash of the message
// ("<id>-<hash>", 16 lowercase hex digits each). A record published again
// (a replay, or a reprocessing after a rollback) carries the same ID, and
// the server drops it if it stored the same message within the stream's
// duplicate window: each record is stored once, exactly-once delivery for
// receivers of the stream. A reprocessing that computed another body (state
// rolled back, inputs counted in another order) is stored too: under
// at-least-once the stream may then hold two bodies for one record, never
// only the older one.
//
// Exactly-once with checkpoints, it writes ahead instead (jetstream_tx.go):
// an input is acked at once and its output kept in the task's checkpointed
// state, and published when the checkpoint of its epoch is complete, so
// the stream holds only outputs that no rollback can take back.
//
// Otherwise publishes are asynchronous. An input is acked when its PubAck arrives
// (a duplicate's PubAck too) and failed, with the reason, when the publish
// fails, so the spout replays it. Acks must come from the task's goroutine,
// not from NATS's, so completions are queued and settled at the next
// Execute or Flush.
type JetStream struct {
	cfg JetStreamConfig
	tc  topology.TaskContext
	out topology.Collector
	nc  *nats.Conn
	js  jetstream.JetStream

	// pending maps each publish awaiting its answer to its input. Only the
	// task's goroutine touches it.
	pending map[*nats.Msg]*topology.Tuple

	// done collects answers from NATS's goroutines; settle swaps it with
	// spare. wake says an answer came. NATS calls the handlers with its
	// own lock held at times, so they only take mu and never call NATS.
	mu    sync.Mutex
	done  []answer
	spare []answer
	wake  chan struct{}

	// Writing ahead (exactly-once, jetstream_tx.go): the outputs of the
	// epoch in progress, and those of earlier epochs not yet committed.
	open    []walMsg
	batches []walBatch
}

// answer is the outcome of one publish.
type answer struct {
	msg *nats.Msg
	err error
}

// Prepare connects and checks the stream (see JetStreamConfig.Stream),
// and, when the run takes checkpoints, that the stream's duplicate window
// covers a rollback (see checkDupeWindow).
func (s *JetStream) Prepare(tc topology.TaskContext, out topology.Collector) error {
	s.cfg.setDefaults()
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	s.tc, s.out = tc, out
	s.pending = make(map[*nats.Msg]*topology.Tuple, s.cfg.MaxInFlight)
	s.wake = make(chan struct{}, 1)
	if err := s.connect(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	if err := s.checkStream(ctx); err != nil {
		s.close()
		return err
	}
	return nil
}

func (s *JetStream) connect() error {
	name := nats.Name(fmt.Sprintf("ackflow sink %s/%d", s.tc.Component, s.tc.Index))
	url, opts := s.cfg.URL, []nats.Option{name}
	if url == "" {
		url, opts = s.tc.NATSURL, append(opts, s.tc.NATSOptions...)
	}
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, append(opts, s.cfg.Options...)...)
	if err != nil {
		return fmt.Errorf("sinks: %s connecting to %s: %w; is the NATS server up, and are the URL and credentials right?", s.tc.Component, url, err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(s.cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(s.cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(s.onAck),
		jetstream.WithPublishAsyncErrHandler(s.onErr))
	if err != nil {
		nc.Close()
		return fmt.Errorf("sinks: %s: %w", s.tc.Component, err)
	}
	s.nc, s.js = nc, js
	if s.tc.Context != nil {
		// A task whose worker dies never gets Cleanup: its connection goes
		// with the task.
		context.AfterFunc(s.tc.Context, nc.Close)
	}
	return nil
}

// checkStream finds the stream, checks it captures Subject, and checks its
// duplicate window.
func (s *JetStream) checkStream(ctx context.Context) error {
	if s.cfg.Subject != "" {
		name, err := s.js.StreamNameBySubject(ctx, s.cfg.Subject)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return fmt.Errorf("sinks: no JetStream stream captures subject %q; create one (nats stream add OUT --subjects %q) or fix Subject", s.cfg.Subject, s.cfg.Subject)
		case err != nil:
			return fmt.Errorf("sinks: looking up the stream of subject %q: %w", s.cfg.Subject, err)
		case s.cfg.Stream == "":
			s.cfg.Stream = name
		case name != s.cfg.Stream:
			return fmt.Errorf("sinks: subject %q belongs to stream %q, not %q; fix Subject or Stream", s.cfg.Subject, name, s.cfg.Stream)
		}
	}
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("sinks: JetStream stream %q does not exist; create it (nats stream add %s --subjects ...) or fix Stream", s.cfg.Stream, s.cfg.Stream)
	}
	if err != nil {
		return fmt.Errorf("sinks: looking up JetStream stream %q: %w", s.cfg.Stream, err)
	}
	return checkDupeWindow(s.cfg.Stream, st.CachedInfo().Config.Duplicates, s.tc.CheckpointEvery, s.tc.MessageTimeout)
}

// checkDupeWindow refuses a duplicate window too short for exactly-once.
// After a crash the run goes back to the last checkpoint, which can be up
// to checkpointEvery old, and the crash itself can take up to the message
// timeout to notice: a record published just after that checkpoint is
// published again that much later, and the server must still remember
// its ID. Without checkpoints (checkpointEvery 0) replays come within a
// few message timeouts and any window reduces duplicates, so nothing is
// refused.
func checkDupeWindow(stream string, window, checkpointEvery, messageTimeout time.Duration) error {
	if checkpointEvery <= 0 {
		return nil
	}
	need := checkpointEvery + messageTimeout
	if window > need {
		return nil
	}
	suggest := roundUp(2*need, time.Minute)
	return fmt.Errorf("sinks: JetStream stream %q drops a repeated message ID only within %v (its duplicate window), but exactly-once needs more than the checkpoint interval plus the message timeout (%v + %v = %v), or a record published again after a rollback is stored twice; raise it: nats stream edit %s --dupe-window %s (or StreamConfig.Duplicates = %v)",
		stream, window, checkpointEvery, messageTimeout, need, stream, minutes(suggest), suggest)
}

func roundUp(d, unit time.Duration) time.Duration { return (d + unit - 1) / unit * unit }

// minutes writes a whole number of minutes the way the nats CLI reads it.
func minutes(d time.Duration) string { return strconv.FormatInt(int64(d/time.Minute), 10) + "m" }

// Execute publishes in. It first settles the publishes that have been
// answered, and waits when MaxInFlight are pending. A tick tuple flushes.
func (s *JetStream) Execute(in *topology.Tuple) {
	if in.Stream == topology.TickStream {
		s.Flush()
		return
	}
	if s.writesAhead() {
		s.hold(in)
		return
	}
	s.settle()
	for len(s.pending) >= s.cfg.MaxInFlight {
		// NATS answers every publish within AckTimeout; the margin only
		// keeps a bug there from hanging the task.
		if !s.await(s.cfg.AckTimeout + time.Second) {
			s.tc.Logger.Warn().Int("pending", len(s.pending)).Msg("sinks: no PubAck nor error within the ack timeout; publishing anyway")
			break
		}
		s.settle()
	}
	s.publish(in)
}

// message encodes in and picks its subject; it fails in when in cannot be
// encoded.
func (s *JetStream) message(in *topology.Tuple) (subject string, data []byte, ok bool) {
	data, err := s.cfg.Encode(in)
	if err != nil {
		s.out.FailWith(in, fmt.Errorf("sinks: encoding record %016x for stream %s: %w", in.ID, s.cfg.Stream, err))
		return "", nil, false
	}
	subject = s.cfg.Subject
	if s.cfg.SubjectOf != nil {
		subject = s.cfg.SubjectOf(in)
	}
	return subject, data, true
}

func (s *JetStream) publish(in *topology.Tuple) {
	subject, data, ok := s.message(in)
	if !ok {
		return
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{msgID(in.ID, subject, data)}}}
	if _, err := s.js.PublishMsgAsync(msg); err != nil {
		s.out.FailWith(in, s.publishError(in, subject, err))
		return
	}
	s.pending[msg] = in
}

// msgID is the Nats-Msg-Id of an output: the record's ID and a hash of its
// subject and body, "<id>-<hash>" in 16 hex digits each. The same record
// published again with the same body (a replay) is stored once. A record
// whose body differs from what was stored under its ID is a new message:
// after a rollback a stateful bolt may compute another body for the same
// record (a count reached in another order), and the server must not drop
// the newer value as a duplicate of the older one.
func msgID(id uint64, subject string, data []byte) string {
	// FNV-1a, 64 bits: deterministic in every process, and cheap next to
	// the publish.
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(subject); i++ {
		h = (h ^ uint64(subject[i])) * prime
	}
	h *= prime // a separator: ("a", "bc") and ("ab", "c") differ
	for _, c := range data {
		h = (h ^ uint64(c)) * prime
	}
	var b [33]byte
	putHex(b[:16], id)
	b[16] = '-'
	putHex(b[17:], h)
	return string(b[:])
}

// recordID is a record's ID as errors name it: 16 hex digits.
func recordID(id uint64) string {
	var b [16]byte
	putHex(b[:], id)
	return string(b[:])
}

// putHex writes v into b as len(b) lowercase hex digits.
func putHex(b []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
}

// Flush acks and fails the inputs whose publishes have been answered. The
// runtime calls it when the task is idle (topology.Flusher).
func (s *JetStream) Flush() { s.settle() }

// Cleanup waits up to CloseTimeout for the pending publishes, settles them,
// and closes the connection. It reports publishes that failed meanwhile or
// got no answer: their inputs were failed, not acked.
func (s *JetStream) Cleanup() error {
	if s.nc == nil {
		return nil
	}
	defer s.close()
	failed, first := s.drain()
	left := s.abandonPending()
	switch {
	case left > 0:
		return fmt.Errorf("sinks: %s task %d stopped with %d publishes to stream %s unanswered after %v, and %d failed; their inputs were failed, not acked", s.tc.Component, s.tc.Index, left, s.cfg.Stream, s.cfg.CloseTimeout, failed)
	case failed > 0:
		return fmt.Errorf("sinks: %s task %d: %d publishes failed while stopping (first: %w); their inputs were failed, not acked", s.tc.Component, s.tc.Index, failed, first)
	}
	return nil
}

// abandonPending fails the inputs whose publishes are still unanswered
// and returns how many there were.
func (s *JetStream) abandonPending() int {
	left := len(s.pending)
	err := fmt.Errorf("sinks: no PubAck from stream %s within %v of stopping", s.cfg.Stream, s.cfg.CloseTimeout)
	for msg, in := range s.pending {
		s.out.FailWith(in, err)
		delete(s.pending, msg)
	}
	return left
}

// drain settles until nothing is pending or CloseTimeout passes, and
// counts the failures.
func (s *JetStream) drain() (failed int, first error) {
	deadline := time.Now().Add(s.cfg.CloseTimeout)
	for {
		n, err := s.settle()
		failed += n
		if first == nil {
			first = err
		}
		left := time.Until(deadline)
		if len(s.pending) == 0 || left <= 0 || !s.await(left) {
			return failed, first
		}
	}
}

func (s *JetStream) close() {
	s.nc.Close()
	s.nc, s.js = nil, nil
}

// settle acks or fails the inputs whose publishes were answered, and
// returns how many failed and the first reason.
func (s *JetStream) settle() (failed int, first error) {
	s.mu.Lock()
	s.done, s.spare = s.spare[:0], s.done
	s.mu.Unlock()
	for _, a := range s.spare {
		in, ok := s.pending[a.msg]
		if !ok {
			continue
		}
		delete(s.pending, a.msg)
		if a.err == nil {
			s.out.Ack(in)
			continue
		}
		err := s.publishError(in, a.msg.Subject, a.err)
		s.out.FailWith(in, err)
		if failed++; first == nil {
			first = err
		}
	}
	clear(s.spare) // do not keep the messages alive
	return failed, first
}

// await waits up to d for an answer to come; false when none did.
func (s *JetStream) await(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.wake:
		return true
	case <-t.C:
		return false
	}
}

// onAck and onErr run on NATS's goroutines.
func (s *JetStream) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	var err error
	if ack.Stream != s.cfg.Stream {
		// Its duplicates are dropped by the other stream, not by ours.
		err = fmt.Errorf("stored in stream %s, which captures the subject too: fix SubjectOf or the streams' subjects", ack.Stream)
	}
	s.answer(m, err)
}

func (s *JetStream) onErr(_ jetstream.JetStream, m *nats.Msg, err error) { s.answer(m, err) }

func (s *JetStream) answer(m *nats.Msg, err error) {
	s.mu.Lock()
	s.done = append(s.done, answer{msg: m, err: err})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// publishError says why a publish failed and what to do.
func (s *JetStream) publishError(in *topology.Tuple, subject string, err error) error {
	hint := "the spout replays the record"
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		hint = fmt.Sprintf("no stream captures the subject: check that stream %s exists and captures %q", s.cfg.Stream, subject)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		hint = fmt.Sprintf("no PubAck within %v (AckTimeout); the spout replays the record, and the stream drops it if it was stored after all", s.cfg.AckTimeout)
	}
	return fmt.Errorf("sinks: publishing record %s to %s: %w; %s", recordID(in.ID), subject, err, hint)
}
