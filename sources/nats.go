package sources

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
)

// NATSConfig says which core NATS subject a NATS spout reads and how.
type NATSConfig struct {
	// URL is the NATS server, e.g. nats://127.0.0.1:4222; empty connects
	// as the task's worker does (TaskContext.NATSURL and NATSOptions).
	URL string
	// Options are passed to nats.Connect after the spout's own (a
	// connection name): credentials, TLS, reconnect settings.
	Options []nats.Option
	// Subject to subscribe to; wildcards allowed.
	Subject string
	// Queue is the queue group the tasks subscribe in, so that each
	// message reaches one task. Empty: with one task, no group; with
	// several, a group named after the topology and component, so that the
	// component as a whole emits each message once.
	Queue string
	// Decode turns a message into a record's values. The default emits
	// two fields, the subject (string) and the payload ([]byte): declare
	// them with Outputs("subject", "data"). A message it refuses is
	// dropped, counted and logged like a message the buffer had no room
	// for.
	Decode func(msg *nats.Msg) (topology.Values, error)
	// OutputStream is the stream the records are emitted on (default
	// topology.DefaultStream).
	OutputStream string
	// Buffer is how many received messages wait for Next (default 4096).
	// When it is full, new messages are dropped: see NATS.Dropped.
	Buffer int
	// PerNext is how many messages one Next emits at most (default 256).
	PerNext int
	// MaxWait bounds how long Next waits for a message when none is
	// buffered (default 100ms).
	MaxWait time.Duration
	// StopAfter, if positive, makes a task's source bounded: exhausted
	// after it has emitted that many messages. For tests and batch runs.
	StopAfter int64
	// StopWhenIdle, if positive, makes a task's source exhausted when no
	// message arrived for that long. For tests and batch runs.
	StopWhenIdle time.Duration
}

// DefaultBuffer is NATSConfig.Buffer's default.
const DefaultBuffer = 4096

func (c *NATSConfig) setDefaults(tc topology.TaskContext) {
	if c.Queue == "" && tc.Parallelism > 1 {
		c.Queue = tc.Topology + "_" + tc.Component
	}
	if c.Decode == nil {
		c.Decode = natsSubjectAndData
	}
	if c.OutputStream == "" {
		c.OutputStream = topology.DefaultStream
	}
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.PerNext == 0 {
		c.PerNext = DefaultPerNext
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
}

// Validate says what is wrong with c, if anything. Open calls it; call it
// earlier to refuse a bad configuration before a run starts.
func (c NATSConfig) Validate() error {
	if c.Subject == "" || strings.ContainsAny(c.Subject, " \t\r\n") {
		return fmt.Errorf("sources: NATSConfig.Subject %q is not a subject; give one such as orders.> (no spaces)", c.Subject)
	}
	if c.Buffer < 0 || c.PerNext < 0 || c.MaxWait < 0 || c.StopAfter < 0 || c.StopWhenIdle < 0 {
		return errors.New("sources: NATSConfig has a negative Buffer, PerNext, MaxWait, StopAfter or StopWhenIdle; use 0 for the default (or for no limit)")
	}
	return nil
}

// natsSubjectAndData is NATSConfig.Decode's default.
func natsSubjectAndData(msg *nats.Msg) (topology.Values, error) {
	return topology.Values{msg.Subject, msg.Data}, nil
}

// NATS emits the messages published on a core NATS subject. Core NATS
// keeps no messages: a message that was missed (a full buffer, a
// disconnect, a restart) is gone, and none can be replayed, so this spout
// feeds at-most-once topologies only. Read a JetStream stream with the
// JetStream spout for the other guarantees.
//
// A record's message ID is the task's index (as partition) and a counter
// of the records it emitted (as offset): unique within a run, though
// not across runs, which at-most-once does not need.
type NATS struct {
	cfg NATSConfig
	tc  topology.TaskContext
	out topology.SpoutCollector

	nc   *nats.Conn
	sub  *nats.Subscription
	msgs chan *nats.Msg

	dropped sampled
	next    int64     // offset of the next record
	last    time.Time // when the last message was taken (or the spout opened)
	done    bool
}

// NewNATS returns a NATS spout. Give the builder a factory that calls it:
//
//	b.Spout("events", func() topology.Spout { return sources.NewNATS(cfg) }, 2).Outputs("subject", "data")
func NewNATS(cfg NATSConfig) *NATS { return &NATS{cfg: cfg} }

// Open refuses every guarantee but at-most-once, then subscribes. The
// subscription is live on the server when Open returns.
func (s *NATS) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	if tc.Guarantee != "at-most-once" {
		return fmt.Errorf("sources: the NATS spout cannot serve %q: core NATS subjects cannot be replayed, so they feed at-most-once only; run at-most-once, or publish to a JetStream stream and read it with the JetStream spout", tc.Guarantee)
	}
	s.cfg.setDefaults(tc)
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	s.tc, s.out = tc, out
	s.msgs = make(chan *nats.Msg, s.cfg.Buffer)
	nc, err := connect(s.cfg.URL, s.cfg.Options, tc)
	if err != nil {
		return err
	}
	s.nc = nc
	if err := s.subscribe(); err != nil {
		s.Close()
		return err
	}
	s.last = time.Now()
	return nil
}

func (s *NATS) subscribe() error {
	var err error
	if s.cfg.Queue != "" {
		s.sub, err = s.nc.QueueSubscribe(s.cfg.Subject, s.cfg.Queue, s.receive)
	} else {
		s.sub, err = s.nc.Subscribe(s.cfg.Subject, s.receive)
	}
	if err != nil {
		return fmt.Errorf("sources: cannot subscribe to %q on %s: %w; check the subject and the account's permissions", s.cfg.Subject, s.cfg.URL, err)
	}
	// Wait until the server has the subscription, so that a message
	// published after Open returns is not missed.
	if err := s.nc.FlushTimeout(openTimeout); err != nil {
		return fmt.Errorf("sources: NATS at %s did not confirm the subscription to %q: %w", s.cfg.URL, s.cfg.Subject, err)
	}
	return nil
}

// receive runs on the subscription's goroutine. It never blocks, so that
// a slow topology costs dropped messages, counted and logged, rather than
// a subscription the server cuts off as a slow consumer.
func (s *NATS) receive(m *nats.Msg) {
	select {
	case s.msgs <- m:
	default:
		s.drop("the buffer is full", nil)
	}
}

// drop counts a message lost here and logs the first and every 1000th.
func (s *NATS) drop(why string, err error) {
	if n, log := s.dropped.add(); log {
		s.tc.Logger.Warn().Err(err).Str("subject", s.cfg.Subject).Int64("dropped", n).Int("buffer", s.cfg.Buffer).
			Msgf("sources: NATS message dropped: %s; core NATS cannot replay it", why)
	}
}

// Dropped is how many messages the task lost: received while its buffer
// was full, or refused by Decode.
func (s *NATS) Dropped() int64 { return s.dropped.load() }

// Next emits the buffered messages, up to PerNext; when none is buffered
// it waits up to MaxWait for one.
func (s *NATS) Next(ctx context.Context) error {
	if s.done {
		return topology.ErrExhausted
	}
	for i := range s.cfg.PerNext {
		m := s.take(ctx, i == 0)
		if m == nil {
			break
		}
		s.emit(m)
		if s.cfg.StopAfter > 0 && s.next >= s.cfg.StopAfter {
			return s.stop()
		}
	}
	if s.cfg.StopWhenIdle > 0 && time.Since(s.last) >= s.cfg.StopWhenIdle {
		return s.stop()
	}
	return nil
}

// take returns the next buffered message, or nil when there is none. With
// wait it waits up to MaxWait for one: only before the first emit of a
// Next, so that a Next that emitted something returns at once.
func (s *NATS) take(ctx context.Context, wait bool) *nats.Msg {
	select {
	case m := <-s.msgs:
		return m
	default:
	}
	if !wait {
		return nil
	}
	t := time.NewTimer(s.cfg.MaxWait)
	defer t.Stop()
	select {
	case m := <-s.msgs:
		return m
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

func (s *NATS) emit(m *nats.Msg) {
	s.last = time.Now()
	vals, err := s.cfg.Decode(m)
	if err != nil {
		s.drop("Decode refused it", err)
		return
	}
	id := topology.MsgID{Partition: int32(s.tc.Index), Offset: s.next}
	s.next++
	// A refused record is dropped by the runtime, as at-most-once allows.
	_ = s.out.EmitTo(s.cfg.OutputStream, id, vals)
}

// stop ends a bounded source: unsubscribing stops filling the buffer.
func (s *NATS) stop() error {
	s.done = true
	if err := s.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.tc.Logger.Warn().Err(err).Str("subject", s.cfg.Subject).Msg("sources: cannot unsubscribe the exhausted NATS spout")
	}
	return topology.ErrExhausted
}

// Ack does nothing: at most once, nothing is tracked.
func (s *NATS) Ack(topology.MsgID) {}

// Fail does nothing: core NATS cannot replay.
func (s *NATS) Fail(topology.MsgID) {}

// Close unsubscribes and disconnects; buffered messages are dropped.
func (s *NATS) Close() error {
	if s.nc == nil {
		return nil
	}
	s.nc.Close()
	s.nc = nil
	return nil
}
