package sources

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamConfig says which JetStream stream a JetStream spout reads and
// how.
type JetStreamConfig struct {
	// URL is the NATS server, e.g. nats://127.0.0.1:4222; empty connects
	// as the task's worker does (TaskContext.NATSURL and NATSOptions).
	URL string
	// Options are passed to nats.Connect after the spout's own (a
	// connection name): credentials, TLS, reconnect settings.
	Options []nats.Option
	// Stream is the JetStream stream to read. It must exist.
	Stream string
	// Subjects, if set, filters the stream to these subjects (wildcards
	// allowed). Several subjects need NATS server 2.10 or later.
	Subjects []string
	// Decode turns a message into a record's values. The default emits
	// two fields, the subject (string) and the payload ([]byte): declare
	// them with Outputs("subject", "data"). An error stops the run: the
	// message is neither lost nor skipped without someone deciding so.
	Decode func(msg jetstream.Msg) (topology.Values, error)
	// OutputStream is the stream the records are emitted on (default
	// topology.DefaultStream).
	OutputStream string
	// StartSequence is the first stream sequence to read (default 1). In
	// durable mode it applies only when the consumer is created.
	StartSequence uint64
	// MaxWait bounds how long Next waits for a message when none is
	// available (default 100ms), so that the runtime gets back to acks and
	// replays quickly.
	MaxWait time.Duration
	// PerNext is how many messages one Next fetches at most (default 256).
	PerNext int
	// MessagesPerSec paces the reading, per task (each task reads the
	// whole stream in positioned mode); 0 or +Inf reads as fast as flow
	// control allows. For demonstrations and tests that need a run to last.
	MessagesPerSec float64
	// StopAtEnd makes the source bounded: the spout returns
	// topology.ErrExhausted once it has emitted every message that was in
	// the stream when it opened. For batch runs and tests. In durable mode
	// a task is done when the consumer has nothing left to deliver and no
	// other task holds an unacked message, which may come back to it.
	StopAtEnd bool

	// Durable, if set, selects the durable mode: a durable consumer of
	// this name whose acks keep the progress on the server (see JetStream).
	Durable string
	// MaxInFlight bounds the messages delivered but not yet acked, for all
	// tasks together, in durable mode (default 4096): the server stops
	// delivering beyond it (the consumer's MaxAckPending).
	MaxInFlight int
	// AckWait is how long the server waits for a message's ack before it
	// delivers the message again, in durable mode (default 5 minutes). Make
	// it longer than the message timeout times a few attempts: while a
	// record is failing and being replayed by the runtime from its own
	// copy, a redelivery by the server would only start a second, duplicate
	// tree of it.
	AckWait time.Duration
}

var (
	_ topology.Positioned      = (*JetStream)(nil)
	_ topology.DeadLetterAware = (*JetStream)(nil)
)

// JetStream defaults.
const (
	DefaultMaxWait     = 100 * time.Millisecond
	DefaultPerNext     = 256
	DefaultMaxInFlight = 4096
	DefaultAckWait     = 5 * time.Minute
)

const (
	// openTimeout bounds the server requests of Open.
	openTimeout = 10 * time.Second
	// requestTimeout bounds a server request made from Next, Seek or Close,
	// which must not hold the task for long.
	requestTimeout = 5 * time.Second
	// inactiveThreshold is how long the server keeps a positioned spout's
	// consumer without pull requests: long enough to outlast a checkpoint
	// pause, short enough that a killed worker's consumers go away.
	inactiveThreshold = 5 * time.Minute
)

func (c *JetStreamConfig) setDefaults() {
	if c.Decode == nil {
		c.Decode = jetStreamSubjectAndData
	}
	if c.OutputStream == "" {
		c.OutputStream = topology.DefaultStream
	}
	if c.StartSequence == 0 {
		c.StartSequence = 1
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.PerNext == 0 {
		c.PerNext = DefaultPerNext
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
}

// Validate says what is wrong with c, if anything. Open calls it; call it
// earlier to refuse a bad configuration before a run starts.
func (c JetStreamConfig) Validate() error {
	if c.Stream == "" || strings.ContainsAny(c.Stream, " \t.*>") {
		return fmt.Errorf("sources: JetStreamConfig.Stream %q is not a stream name; give the name of an existing stream (no spaces, dots or wildcards)", c.Stream)
	}
	if strings.ContainsAny(c.Durable, " \t.*>") {
		return fmt.Errorf("sources: JetStreamConfig.Durable %q is not a consumer name; use letters, digits, - and _", c.Durable)
	}
	if slices.Contains(c.Subjects, "") {
		return errors.New("sources: JetStreamConfig.Subjects has an empty subject; remove it")
	}
	if math.IsNaN(c.MessagesPerSec) || c.MessagesPerSec < 0 {
		return fmt.Errorf("sources: JetStreamConfig.MessagesPerSec %v: use a positive rate, or 0 for no limit", c.MessagesPerSec)
	}
	if c.MaxWait < 0 || c.PerNext < 0 || c.MaxInFlight < 0 || c.AckWait < 0 {
		return fmt.Errorf("sources: JetStreamConfig has a negative MaxWait (%v), PerNext (%d), MaxInFlight (%d) or AckWait (%v); use 0 for the default", c.MaxWait, c.PerNext, c.MaxInFlight, c.AckWait)
	}
	return nil
}

// jetStreamSubjectAndData is JetStreamConfig.Decode's default.
func jetStreamSubjectAndData(msg jetstream.Msg) (topology.Values, error) {
	return topology.Values{msg.Subject(), msg.Data()}, nil
}

// JetStream emits the messages of a JetStream stream. A record's message ID
// is the message's stream sequence, so a replay or a seek reproduces it.
//
// In the positioned mode (the default) each task reads the stream through
// its own ephemeral consumer that starts at a stream sequence and asks for
// no acks, and emits the messages whose sequence mod the parallelism is its
// index: every task reads the whole stream, and each message is emitted by
// one task. Nothing is acked on the server: the runtime replays failed
// records from the copies it keeps, and progress is the position (the next
// stream sequence), which checkpoints record and Seek returns to. This
// mode serves every guarantee.
//
// In the durable mode (JetStreamConfig.Durable set) the tasks share one
// durable pull consumer with explicit acks, and the server hands each
// message to one of them. A message is acked when its tree has completed,
// so a topology that restarts resumes after the acked messages: progress is
// kept on the server across runs. The tasks share the consumer instead of
// each emitting every p-th sequence: on a shared consumer a task would be
// handed, and would hold up, the other tasks' messages, and a consumer per
// task would tie the progress kept on the server to the parallelism, so
// that a run with another parallelism would start over. The server cannot
// rewind such a consumer, so this mode has no position and cannot serve
// checkpoints or exactly-once.
type JetStream struct {
	cfg JetStreamConfig
	tc  topology.TaskContext
	out topology.SpoutCollector

	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer // nil when it must be made again (positioned mode)

	index, of uint64
	next      uint64 // positioned: the stream sequence of the next message to read
	consSeq   uint64 // positioned: consumer sequence of the last delivery, to see gaps
	held      map[uint64]jetstream.Msg

	bounded, exhausted bool
	end                uint64 // bounded: the stream's last sequence when the spout opened
	batch              []jetstream.Msg
	problems           sampled
	started            time.Time // of pacing
	fetched            int64     // messages fetched since started
}

// NewJetStream returns a JetStream spout. Give the builder a factory that
// calls it:
//
//	b.Spout("orders", func() topology.Spout { return sources.NewJetStream(cfg) }, 2).Outputs("subject", "data")
func NewJetStream(cfg JetStreamConfig) *JetStream { return &JetStream{cfg: cfg} }

func (s *JetStream) durable() bool { return s.cfg.Durable != "" }

// Open connects, finds the stream and makes the consumer.
func (s *JetStream) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.cfg.setDefaults()
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if s.durable() && (tc.Guarantee == "exactly-once" || tc.CheckpointEvery > 0) {
		return fmt.Errorf("sources: the JetStream spout's durable mode (consumer %q) keeps progress on the server and cannot rewind to a checkpoint; leave JetStreamConfig.Durable empty for checkpoints and exactly-once", s.cfg.Durable)
	}
	s.tc, s.out = tc, out
	s.index, s.of = uint64(tc.Index), uint64(max(tc.Parallelism, 1))
	s.next = s.cfg.StartSequence
	nc, err := connect(s.cfg.URL, s.cfg.Options, tc)
	if err != nil {
		return err
	}
	s.nc = nc
	if err := s.start(); err != nil {
		s.Close()
		return err
	}
	return nil
}

func (s *JetStream) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	var err error
	if s.js, err = jetstream.New(s.nc); err != nil {
		return fmt.Errorf("sources: %w", err)
	}
	stream, err := s.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return s.streamErr(err)
	}
	if s.cfg.StopAtEnd {
		s.bounded, s.end = true, stream.CachedInfo().State.LastSeq
	}
	if s.durable() {
		s.held = map[uint64]jetstream.Msg{}
		s.warnShortAckWait()
		return s.openDurable(ctx)
	}
	return s.openConsumer(ctx)
}

// streamErr says what to do about a failure to reach the stream.
func (s *JetStream) streamErr(err error) error {
	where := s.cfg.URL
	if where == "" && s.nc != nil {
		where = s.nc.ConnectedUrlRedacted() // the worker's own connection
	}
	if where == "" {
		where = "the worker's NATS server"
	}
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("sources: JetStream stream %q does not exist on %s; create it first (for example with `nats stream add`) or fix JetStreamConfig.Stream", s.cfg.Stream, where)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("sources: JetStream is not enabled on %s for this account; enable it (nats-server -js), or read core NATS subjects with the NATS spout (at-most-once only)", where)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("sources: NATS at %s did not answer about stream %q: %w; check that the server runs JetStream and that these credentials may use it", where, s.cfg.Stream, err)
	}
	return fmt.Errorf("sources: JetStream stream %q on %s: %w", s.cfg.Stream, where, err)
}

func (s *JetStream) warnShortAckWait() {
	if mt := s.tc.MessageTimeout; mt > 0 && s.cfg.AckWait < 3*mt {
		s.tc.Logger.Warn().Dur("ack_wait", s.cfg.AckWait).Dur("message_timeout", mt).
			Msg("sources: JetStream AckWait is shorter than three message timeouts; the server may deliver a message again while the runtime still replays it, which makes duplicates")
	}
}

// filter sets the consumer's subject filter from the config.
func (s *JetStream) filter(cfg *jetstream.ConsumerConfig) {
	if len(s.cfg.Subjects) == 1 {
		cfg.FilterSubject = s.cfg.Subjects[0] // understood by servers before 2.10 too
		return
	}
	cfg.FilterSubjects = s.cfg.Subjects
}

// openConsumer makes the positioned mode's consumer, starting at s.next.
func (s *JetStream) openConsumer(ctx context.Context) error {
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       s.next,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: inactiveThreshold,
		MemoryStorage:     true, // made again from the position if lost
		Replicas:          1,
	}
	s.filter(&cfg)
	cons, err := s.js.CreateConsumer(ctx, s.cfg.Stream, cfg)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return s.streamErr(err)
		}
		return fmt.Errorf("sources: cannot create a consumer on JetStream stream %q: %w", s.cfg.Stream, err)
	}
	s.cons, s.consSeq = cons, 0
	return nil
}

// reopen makes the positioned mode's consumer again at the position.
func (s *JetStream) reopen(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return s.openConsumer(ctx)
}

// dropConsumer deletes the positioned mode's consumer. Failures are
// ignored: the server removes an idle consumer after inactiveThreshold.
func (s *JetStream) dropConsumer() {
	if s.cons == nil || s.durable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_ = s.js.DeleteConsumer(ctx, s.cfg.Stream, s.cons.CachedInfo().Name)
	s.cons = nil
}

// openDurable finds or creates the durable consumer.
func (s *JetStream) openDurable(ctx context.Context) error {
	cons, err := s.js.Consumer(ctx, s.cfg.Stream, s.cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, s.durableConfig())
	}
	if err != nil {
		return fmt.Errorf("sources: cannot open the durable consumer %q on JetStream stream %q: %w", s.cfg.Durable, s.cfg.Stream, err)
	}
	if err := s.checkDurable(cons.CachedInfo().Config); err != nil {
		return err
	}
	s.cons = cons
	return nil
}

func (s *JetStream) durableConfig() jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   s.cfg.StartSequence,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxInFlight,
	}
	s.filter(&cfg)
	return cfg
}

// checkDurable refuses an existing consumer that the durable mode cannot
// use as configured: without explicit acks nothing would keep progress,
// and with another filter the spout would read other messages than asked.
func (s *JetStream) checkDurable(have jetstream.ConsumerConfig) error {
	if have.AckPolicy != jetstream.AckExplicitPolicy {
		return fmt.Errorf("sources: the consumer %q on stream %q acks with policy %v, but the durable mode needs explicit acks; delete the consumer (nats consumer rm) or choose another JetStreamConfig.Durable", s.cfg.Durable, s.cfg.Stream, have.AckPolicy)
	}
	got := have.FilterSubjects
	if have.FilterSubject != "" {
		got = []string{have.FilterSubject}
	}
	if !sameSet(got, s.cfg.Subjects) {
		return fmt.Errorf("sources: the consumer %q on stream %q filters subjects %q, but JetStreamConfig.Subjects is %q; delete the consumer or make them equal", s.cfg.Durable, s.cfg.Stream, got, s.cfg.Subjects)
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Next emits the messages available now, up to PerNext; when there are
// none it waits up to MaxWait for one.
func (s *JetStream) Next(ctx context.Context) error {
	if s.bounded && !s.durable() && s.next > s.end {
		s.exhausted = true
	}
	if s.exhausted {
		return topology.ErrExhausted
	}
	if s.cons == nil {
		if err := s.reopen(ctx); err != nil {
			return s.problem(ctx, err)
		}
	}
	n := s.budget()
	if n == 0 {
		return nil
	}
	msgs, fetchErr := s.fetch(ctx, n) // messages that arrived before a failure are taken too
	s.fetched += int64(len(msgs))
	take := s.takePositioned
	if s.durable() {
		take = s.takeDurable
	}
	if err := take(msgs); err != nil {
		return err
	}
	if fetchErr != nil {
		return s.fetchFailed(ctx, fetchErr)
	}
	if len(msgs) == 0 {
		return s.caughtUp(ctx)
	}
	return nil
}

// budget is how many messages this Next may fetch: PerNext, or fewer when
// paced. Pacing starts at the first Next, also after a Seek, so a restored
// spout does not rush to catch up.
func (s *JetStream) budget() int {
	rate := s.cfg.MessagesPerSec
	if rate == 0 || math.IsInf(rate, 1) {
		return s.cfg.PerNext
	}
	if s.started.IsZero() {
		s.started = time.Now()
	}
	due := time.Since(s.started).Seconds()*rate + 1 - float64(s.fetched)
	return int(max(0, min(float64(s.cfg.PerNext), due)))
}

// fetch returns the messages available now, up to n. When there are
// none and the source is not bounded, it waits up to MaxWait for one, so
// that an idle spout neither spins nor keeps the runtime waiting.
func (s *JetStream) fetch(ctx context.Context, n int) ([]jetstream.Msg, error) {
	b, err := s.cons.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	s.batch = drain(s.batch[:0], b)
	if len(s.batch) > 0 || b.Error() != nil || s.bounded {
		return s.batch, b.Error()
	}
	wait, cancel := context.WithTimeout(ctx, s.cfg.MaxWait)
	defer cancel()
	if b, err = s.cons.Fetch(1, jetstream.FetchContext(wait)); err != nil {
		return nil, err
	}
	s.batch = drain(s.batch, b)
	if err := b.Error(); err != nil && wait.Err() == nil {
		return s.batch, err
	}
	return s.batch, nil
}

// drain reads a fetch to its end, so that no goroutine of it outlives Next.
func drain(dst []jetstream.Msg, b jetstream.MessageBatch) []jetstream.Msg {
	for m := range b.Messages() {
		dst = append(dst, m)
	}
	return dst
}

// fetchFailed handles a failed fetch. In positioned mode the consumer is
// made again at the position: that repairs a consumer the server lost (a
// restart: it is kept in memory) or removed. In durable mode a consumer
// that is gone is an error, since making it again would restart from
// StartSequence. Anything else is logged and tried again at the next call:
// the connection reconnects by itself.
func (s *JetStream) fetchFailed(ctx context.Context, err error) error {
	if !s.durable() {
		s.dropConsumer()
		return s.problem(ctx, err)
	}
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("sources: the durable consumer %q on stream %q was deleted; its progress is gone: create it again (the spout does at Open) and restart the run", s.cfg.Durable, s.cfg.Stream)
	}
	return s.problem(ctx, err)
}

// problem logs a failure the spout retries at the next Next. Only a
// missing stream stops the run: no retry brings it back.
func (s *JetStream) problem(ctx context.Context, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return s.streamErr(err)
	}
	if ctx.Err() != nil {
		return nil // the task is stopping
	}
	if n, log := s.problems.add(); log {
		s.tc.Logger.Warn().Err(err).Str("stream", s.cfg.Stream).Int64("failures", n).Msg("sources: reading the JetStream stream failed; retrying")
	}
	return nil
}

// caughtUp is called after a fetch found nothing. A bounded source is done
// when the server says the consumer has nothing left to deliver; an empty
// fetch alone does not say so, because a fetch from a consumer that
// vanished comes back empty too. In durable mode a message delivered but
// not acked may come back (naked by a task that closed, or after AckWait),
// so a task is done only when every such message is one it holds itself.
func (s *JetStream) caughtUp(ctx context.Context) error {
	if !s.bounded {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	info, err := s.cons.Info(rctx)
	if err != nil {
		return s.fetchFailed(ctx, err)
	}
	if info.NumPending > 0 || info.NumAckPending > len(s.held) {
		return nil
	}
	s.exhausted = true
	return topology.ErrExhausted
}

// takePositioned emits the task's share of msgs and moves the position
// past each message read.
func (s *JetStream) takePositioned(msgs []jetstream.Msg) error {
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("sources: a message of stream %q has no JetStream metadata: %w", s.cfg.Stream, err)
		}
		if md.Sequence.Consumer != s.consSeq+1 {
			// A delivery went missing, and with no acks the server will
			// not send it again: read again from the position.
			s.dropConsumer()
			return nil
		}
		s.consSeq = md.Sequence.Consumer
		seq := md.Sequence.Stream
		if s.bounded && seq > s.end {
			s.exhausted = true
			return topology.ErrExhausted
		}
		if seq%s.of == s.index {
			vals, err := s.decode(m, seq)
			if err != nil {
				return err
			}
			// A refused record is dead-lettered by the runtime; the
			// stream moves on.
			_ = s.out.EmitTo(s.cfg.OutputStream, topology.MsgID{Offset: int64(seq)}, vals)
		}
		s.next = seq + 1
	}
	return nil
}

func (s *JetStream) decode(m jetstream.Msg, seq uint64) (topology.Values, error) {
	vals, err := s.cfg.Decode(m)
	if err != nil {
		return nil, fmt.Errorf("sources: cannot decode message %d of stream %q: %w; fix JetStreamConfig.Decode, or remove the message (nats stream rmm %s %d)", seq, s.cfg.Stream, err, s.cfg.Stream, seq)
	}
	return vals, nil
}

// takeDurable emits msgs and holds each until its tree completes.
func (s *JetStream) takeDurable(msgs []jetstream.Msg) error {
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("sources: a message of stream %q has no JetStream metadata: %w", s.cfg.Stream, err)
		}
		seq := md.Sequence.Stream
		if s.bounded && seq > s.end {
			s.exhausted = true // after this batch
			s.settle(m.Nak, seq)
			continue
		}
		if _, ok := s.held[seq]; ok {
			s.held[seq] = m // redelivered while its tree is in flight: the runtime already tracks it
			continue
		}
		vals, err := s.decode(m, seq)
		if err != nil {
			return err
		}
		if err := s.out.EmitTo(s.cfg.OutputStream, topology.MsgID{Offset: int64(seq)}, vals); err != nil {
			// Refused: the runtime dead-lettered it (at most once: dropped
			// it), so the server must not deliver it again.
			s.settle(m.Term, seq)
			continue
		}
		s.held[seq] = m
	}
	if s.exhausted {
		return topology.ErrExhausted
	}
	return nil
}

// settle sends an ack, nak or term and logs a failure to. A lost ack only
// means the server delivers the message again after AckWait.
func (s *JetStream) settle(send func() error, seq uint64) {
	if err := send(); err != nil {
		if n, log := s.problems.add(); log {
			s.tc.Logger.Warn().Err(err).Str("stream", s.cfg.Stream).Uint64("sequence", seq).Int64("failures", n).Msg("sources: cannot settle a JetStream message; the server will deliver it again after AckWait")
		}
	}
}

// release forgets the held message of id and returns it (nil if none).
func (s *JetStream) release(id topology.MsgID) jetstream.Msg {
	seq := uint64(id.Offset)
	m := s.held[seq]
	delete(s.held, seq)
	return m
}

// Ack acks the message on the server in durable mode: its tree completed.
// The positioned mode acks nothing.
func (s *JetStream) Ack(id topology.MsgID) {
	if m := s.release(id); m != nil {
		s.settle(m.Ack, uint64(id.Offset))
	}
}

// Fail does nothing, in both modes. The runtime replays the record from
// the copy it keeps; a nak would make the server deliver the message again
// as well, and that second copy would only be a duplicate tree.
func (s *JetStream) Fail(topology.MsgID) {}

// DeadLettered terminates the message in durable mode, so the server never
// delivers it again: the dead letters have it.
func (s *JetStream) DeadLettered(id topology.MsgID, _ string) {
	if m := s.release(id); m != nil {
		s.settle(m.Term, uint64(id.Offset))
	}
}

var errDurableNoPosition = fmt.Errorf("sources: the JetStream spout's durable mode keeps progress on the server and cannot rewind; leave JetStreamConfig.Durable empty (the positioned mode) for checkpoints (%w)", topology.ErrNoPosition)

// Position is the stream sequence of the next message to read, as a
// uvarint. The durable mode has none.
func (s *JetStream) Position() ([]byte, error) {
	if s.durable() {
		return nil, errDurableNoPosition
	}
	return encodePosition(s.next), nil
}

// Seek makes the consumer again at a position Position returned.
func (s *JetStream) Seek(position []byte) error {
	if s.durable() {
		return errDurableNoPosition
	}
	seq, err := decodePosition(position, "stream sequence", maxOffset)
	if err != nil {
		return err
	}
	if seq == 0 {
		return errors.New("sources: JetStream position 0 is not a stream sequence (they start at 1); was it taken from another kind of source?")
	}
	s.dropConsumer()
	s.next, s.exhausted = seq, false
	return s.reopen(context.Background())
}

// Close gives back what the task holds and disconnects. In durable mode it
// naks the messages still in flight, so that the next run gets them at
// once instead of after AckWait; the positioned mode deletes its consumer.
func (s *JetStream) Close() error {
	if s.nc == nil {
		return nil
	}
	for seq, m := range s.held {
		s.settle(m.Nak, seq)
	}
	s.held = nil
	s.dropConsumer()
	// Acks and naks are published without waiting: make sure they left.
	err := s.nc.FlushTimeout(requestTimeout)
	s.nc.Close()
	s.nc = nil
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("sources: closing the JetStream spout: acks may not have reached the server (they are delivered again after AckWait): %w", err)
	}
	return nil
}
