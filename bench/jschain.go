package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/sinks"
)

// ChainConfig tunes a JetStreamChain run. The zero value is what a careful
// NATS user would pick: batches of 500, at most 4096 unacknowledged async
// publishes, file storage.
type ChainConfig struct {
	// Batch is how many messages a stage takes from its consumer before it
	// publishes their output and acknowledges them (default 500).
	Batch int
	// MaxPending bounds the async publishes awaiting a JetStream ack, per
	// publisher (default 4096).
	MaxPending int
	// Memory puts both streams in memory. The default is file storage,
	// which is what JetStream users run for data they cannot lose.
	Memory bool
	// Timeout bounds the whole run on top of the caller's context (default
	// five minutes), so that a lost message ends the run with an error
	// instead of a hang.
	Timeout time.Duration
}

func (c *ChainConfig) setDefaults() {
	if c.Batch == 0 {
		c.Batch = 500
	}
	if c.MaxPending == 0 {
		c.MaxPending = 4096
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
}

// Validate reports a configuration that cannot run. Zero fields are valid:
// they take their defaults.
func (c ChainConfig) Validate() error {
	switch {
	case c.Batch < 0:
		return fmt.Errorf("bench: ChainConfig.Batch is %d; want a positive count (0 means 500)", c.Batch)
	case c.MaxPending < 0:
		return fmt.Errorf("bench: ChainConfig.MaxPending is %d; want a positive count (0 means 4096)", c.MaxPending)
	case c.Timeout < 0:
		return fmt.Errorf("bench: ChainConfig.Timeout is %s; want a positive duration (0 means five minutes)", c.Timeout)
	}
	return nil
}

// ChainResult is what one JetStreamChain run measured.
type ChainResult struct {
	// Lines is how many input lines the split stage read.
	Lines int
	// Words is how many words the split stage emitted (and the count stage
	// counted).
	Words int
	// Elapsed runs from the first input publish to the last word counted.
	Elapsed time.Duration
	// RecordsPerSec is (Lines + Words) / Elapsed. A record is counted each
	// time it passes through a stage: the lines the first stage reads plus
	// the words it emits to the second. ackflow's word count is measured by
	// the same definition (records read by the spout plus records emitted
	// by split), so the two figures divide.
	RecordsPerSec float64
	// Counts is the word count the count stage arrived at.
	Counts map[string]int64
}

// JetStreamChain runs the word count a NATS user would build without
// ackflow, and measures it. Each stage is a durable pull consumer with
// explicit acks that republishes to the next stream:
//
//	input --> stream LINES --split--> stream WORDS --count--> map
//
// The caller's lines are published asynchronously to LINES. The split
// consumer takes a batch of lines, publishes each word (wordcount.SplitWords)
// asynchronously to WORDS with a Nats-Msg-Id of "<line sequence>-<word
// index>", waits for the batch's publish acks and only then acks the lines:
// a line redelivered after a crash republishes the same IDs, and the
// server's duplicate window drops them. That is at-least-once delivery with
// deduplication, the shape a careful NATS user writes. The count consumer
// counts words in a map and acks each batch.
//
// The streams are created for this run under names no other run uses, and
// deleted when it ends.
func JetStreamChain(ctx context.Context, url string, lines []string, cfg ChainConfig) (ChainResult, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return ChainResult{}, err
	}
	if len(lines) == 0 {
		return ChainResult{}, errors.New("bench: JetStreamChain needs at least one input line")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, cfg.Timeout,
		fmt.Errorf("the run did not finish within %s; raise ChainConfig.Timeout or pass fewer lines", cfg.Timeout))
	defer stop()

	// Each role has its own connection, as it would in separate processes.
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	connect := func(role string) (*nats.Conn, error) {
		// While a connection is down the client buffers publishes and
		// waits for acks that will not come; a run that lives through a
		// reconnect measures the reconnect, so it fails at once instead.
		lost := nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cancel(fmt.Errorf("the %s connection was lost: %w", role, err))
			}
		})
		nc, err := nats.Connect(url, nats.Name("ackflow-bench-jsc-"+role), lost)
		if err != nil {
			return nil, fmt.Errorf("bench: connecting the jetstream chain's %s to %s: %w", role, url, err)
		}
		conns = append(conns, nc)
		return nc, nil
	}
	inputConn, err := connect("input")
	if err != nil {
		return ChainResult{}, err
	}
	splitConn, err := connect("split")
	if err != nil {
		return ChainResult{}, err
	}
	countConn, err := connect("count")
	if err != nil {
		return ChainResult{}, err
	}

	var inputErr, splitErr firstError
	// A lost publish ack must become an error rather than a wait for the
	// run's timeout.
	const pubAckTimeout = 30 * time.Second
	inputJS, err := jetstream.New(inputConn,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(pubAckTimeout),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { inputErr.set(err) }))
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: opening JetStream for the chain's input: %w", err)
	}
	splitJS, err := jetstream.New(splitConn,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(pubAckTimeout),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { splitErr.set(err) }))
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: opening JetStream for the chain's split stage: %w", err)
	}
	countJS, err := jetstream.New(countConn)
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: opening JetStream for the chain's count stage: %w", err)
	}

	// Names of its own let runs share a server; a stream left by a crashed
	// run with the same name would hold stale messages, so it is deleted.
	// Limits retention with no limits keeps every message for the run, and
	// the default two-minute duplicate window outlasts the default 30 s ack
	// wait, so any redelivery is deduplicated.
	suffix := rand.Text()
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	linesStream := jetstream.StreamConfig{
		Name:     "JSC_LINES_" + suffix,
		Subjects: []string{"jsc." + suffix + ".lines"},
		Storage:  storage,
	}
	wordsStream := jetstream.StreamConfig{
		Name:     "JSC_WORDS_" + suffix,
		Subjects: []string{"jsc." + suffix + ".words"},
		Storage:  storage,
	}
	var created []string
	defer func() {
		// Best effort, and skipped on a lost connection rather than waiting
		// for it: the run's figures or error stand either way, and a stream
		// left behind has a name no later run will use. The run's context
		// may be done, so cleaning up must not depend on it.
		if len(created) == 0 || !inputConn.IsConnected() {
			return
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer dcancel()
		for _, name := range created {
			_ = inputJS.DeleteStream(dctx, name)
		}
	}()
	for _, sc := range []jetstream.StreamConfig{linesStream, wordsStream} {
		if err := inputJS.DeleteStream(ctx, sc.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return ChainResult{}, fmt.Errorf("bench: deleting the leftover stream %s: %w", sc.Name, err)
		}
		if _, err := inputJS.CreateStream(ctx, sc); err != nil {
			return ChainResult{}, fmt.Errorf("bench: creating stream %s (is JetStream enabled on %s?): %w", sc.Name, url, err)
		}
		created = append(created, sc.Name)
	}

	// MaxAckPending covers a batch being processed, one waiting in the
	// stage's channel and one buffered by the client, so the server never
	// starves a stage that is keeping up.
	maxAckPending := 4 * cfg.Batch
	splitCons, err := splitJS.CreateOrUpdateConsumer(ctx, linesStream.Name, jetstream.ConsumerConfig{
		Durable:       "split",
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: maxAckPending,
	})
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: creating the split consumer on %s: %w", linesStream.Name, err)
	}
	// Counting is done in order by one consumer, so acking the last message
	// of a batch acks the batch.
	countCons, err := countJS.CreateOrUpdateConsumer(ctx, wordsStream.Name, jetstream.ConsumerConfig{
		Durable:       "count",
		AckPolicy:     jetstream.AckAllPolicy,
		MaxAckPending: maxAckPending,
	})
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: creating the count consumer on %s: %w", wordsStream.Name, err)
	}

	split := &chainSplit{
		js:       splitJS,
		subject:  wordsStream.Subjects[0],
		pubErr:   &splitErr,
		lines:    len(lines),
		seenSeqs: make(seqSet, 0, len(lines)/64+1),
	}
	count := &chainCount{counts: make(map[string]int64)}
	count.target.Store(-1)
	targetKnown := make(chan struct{})

	var wg sync.WaitGroup
	splitDone := make(chan struct{})
	countDone := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := consumeBatches(ctx, splitCons, cfg.Batch, nil, split.handle); err != nil {
			cancel(fmt.Errorf("split stage: %w", err))
			return
		}
		close(splitDone)
	}()
	go func() {
		defer wg.Done()
		if err := consumeBatches(ctx, countCons, cfg.Batch, targetKnown, count.handle); err != nil {
			cancel(fmt.Errorf("count stage: %w", err))
			return
		}
		close(countDone)
	}()
	// Stages stop when the run does, whichever way it ends.
	defer wg.Wait()
	defer cancel(nil)

	stopped := func() error {
		return fmt.Errorf("bench: jetstream chain stopped with %d of %d lines split and %d words counted (%s; %s): %w",
			split.done.Load(), len(lines), count.counted.Load(),
			consumerState(splitCons), consumerState(countCons), context.Cause(ctx))
	}

	start := time.Now()
	inputSubject := linesStream.Subjects[0]
	for i, line := range lines {
		msg := &nats.Msg{Subject: inputSubject, Data: []byte(line)}
		if _, err := sinks.PublishAsync(ctx, inputJS, msg, jetstream.WithMsgID(strconv.Itoa(i))); err != nil {
			if ctx.Err() != nil {
				return ChainResult{}, stopped()
			}
			return ChainResult{}, fmt.Errorf("bench: publishing input line %d of %d to %s: %w", i+1, len(lines), inputSubject, err)
		}
	}
	select {
	case <-inputJS.PublishAsyncComplete():
	case <-ctx.Done():
		return ChainResult{}, stopped()
	}
	if err := inputErr.get(); err != nil {
		return ChainResult{}, fmt.Errorf("bench: an input line published to %s was not stored: %w", inputSubject, err)
	}

	select {
	case <-splitDone:
	case <-ctx.Done():
		return ChainResult{}, stopped()
	}
	// Every word's publish ack has arrived by now, so the stream's last
	// sequence is the number of distinct words: the count stage's target.
	info, err := countJS.Stream(ctx, wordsStream.Name)
	if err != nil {
		return ChainResult{}, fmt.Errorf("bench: reading how many words stream %s holds: %w", wordsStream.Name, err)
	}
	words := int(info.CachedInfo().State.LastSeq)
	count.target.Store(int64(words))
	close(targetKnown)
	select {
	case <-countDone:
	case <-ctx.Done():
		return ChainResult{}, stopped()
	}
	cancel(nil)
	wg.Wait() // count's map is read below

	// The run ends when both stages have finished: the count stage may have
	// counted the last word before the split stage acked the last line.
	end := count.last
	if split.finished.After(end) {
		end = split.finished
	}
	elapsed := end.Sub(start)
	return ChainResult{
		Lines:         len(lines),
		Words:         words,
		Elapsed:       elapsed,
		RecordsPerSec: float64(len(lines)+words) / elapsed.Seconds(),
		Counts:        count.counts,
	}, nil
}

// chainSplit is the split stage's state. Only its consumeBatches goroutine
// touches it while the run lasts, except the done counter, which errors
// report.
type chainSplit struct {
	js       jetstream.JetStream
	subject  string
	pubErr   *firstError
	lines    int
	seenSeqs seqSet
	seqs     []uint64     // the batch's stream sequences, reused
	finished time.Time    // when the last line was acked
	done     atomic.Int64 // distinct lines split and acked
}

func (s *chainSplit) handle(ctx context.Context, batch []jetstream.Msg) (bool, error) {
	s.seqs = s.seqs[:0]
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("reading a line's metadata: %w", err)
		}
		seq := md.Sequence.Stream
		// The input publisher deduplicates too, so a fresh stream numbers
		// the lines 1..n.
		if seq == 0 || seq > uint64(s.lines) {
			return false, fmt.Errorf("line stream sequence %d is outside 1..%d; the stream was not fresh", seq, s.lines)
		}
		s.seqs = append(s.seqs, seq)
		prefix := strconv.FormatUint(seq, 10) + "-"
		for k, w := range wordcount.SplitWords(string(m.Data())) {
			msg := &nats.Msg{Subject: s.subject, Data: []byte(w)}
			if _, err := sinks.PublishAsync(ctx, s.js, msg, jetstream.WithMsgID(prefix+strconv.Itoa(k))); err != nil {
				return false, fmt.Errorf("publishing word %d of line %d: %w", k, seq, err)
			}
		}
	}
	// The lines are acked only once their words are stored: acking first
	// would lose the words of a crash in between.
	select {
	case <-s.js.PublishAsyncComplete():
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	if err := s.pubErr.get(); err != nil {
		return false, fmt.Errorf("a word was not stored: %w", err)
	}
	for i, m := range batch {
		if err := m.Ack(); err != nil {
			return false, fmt.Errorf("acking line %d: %w", s.seqs[i], err)
		}
		if !s.seenSeqs.testAndSet(s.seqs[i]) {
			s.done.Add(1)
		}
	}
	if s.done.Load() < int64(s.lines) {
		return false, nil
	}
	s.finished = time.Now()
	return true, nil
}

// chainCount is the count stage's state. Only its consumeBatches goroutine
// touches counts, seenSeqs and last; the others are atomics that the run
// reads.
type chainCount struct {
	counts   map[string]int64
	seenSeqs seqSet
	last     time.Time    // when the last new word was counted
	counted  atomic.Int64 // distinct words counted
	target   atomic.Int64 // distinct words to count; -1 until split is done
}

func (c *chainCount) handle(_ context.Context, batch []jetstream.Msg) (bool, error) {
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("reading a word's metadata: %w", err)
		}
		// The map is not stored with the acks, so a redelivered word must be
		// recognised here or it would be counted twice.
		if c.seenSeqs.testAndSet(md.Sequence.Stream) {
			continue
		}
		c.counts[string(m.Data())]++
		c.counted.Add(1)
		c.last = time.Now()
	}
	if len(batch) > 0 {
		if err := batch[len(batch)-1].Ack(); err != nil {
			return false, fmt.Errorf("acking a batch of words: %w", err)
		}
	}
	target := c.target.Load()
	return target >= 0 && c.counted.Load() >= target, nil
}

// consumeBatches feeds the messages of cons to handle in batches of up to
// batch messages until handle reports that the stage is done. A batch is
// whatever has arrived, up to the limit, when the stage is ready for more:
// waiting for a full batch would stall the tail of the run. A receive on
// wake calls handle with an empty batch, for a stage whose end condition
// changes without a message.
func consumeBatches(ctx context.Context, cons jetstream.Consumer, batch int, wake <-chan struct{},
	handle func(context.Context, []jetstream.Msg) (bool, error)) error {
	msgs := make(chan jetstream.Msg, batch)
	quit := make(chan struct{})
	// A pull request that the server stops serving is noticed when its
	// idle heartbeats stop; the client's defaults (30 s expiry, 15 s
	// heartbeats) would stall a run for half a minute before it pulls
	// again, so both are short here.
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-quit:
		}
	}, jetstream.PullMaxMessages(batch), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return fmt.Errorf("starting to consume: %w", err)
	}
	defer func() {
		close(quit) // unblocks a callback waiting on a full channel
		cc.Stop()
		<-cc.Closed()
	}()

	buf := make([]jetstream.Msg, 0, batch)
	for {
		buf = buf[:0]
		select {
		case m := <-msgs:
			buf = append(buf, m)
		case <-wake:
			wake = nil // a closed channel would fire forever
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	fill:
		for len(buf) > 0 && len(buf) < batch {
			select {
			case m := <-msgs:
				buf = append(buf, m)
			default:
				break fill
			}
		}
		done, err := handle(ctx, buf)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// consumerState says where the server has cons, for the error of a run
// that stopped: whether messages wait undelivered, delivered but unacked,
// or the server holds no pull request for them.
func consumerState(cons jetstream.Consumer) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Sprintf("consumer %s: %v", cons.CachedInfo().Name, err)
	}
	return fmt.Sprintf("consumer %s: %d undelivered, %d unacked, %d redelivered, %d pull requests waiting",
		info.Name, info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting)
}

// firstError keeps the first error reported by callbacks on other
// goroutines.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// seqSet is a set of stream sequence numbers, dense from 1, one bit each.
type seqSet []uint64

// testAndSet adds seq and reports whether it was already present.
func (s *seqSet) testAndSet(seq uint64) bool {
	i, bit := seq/64, uint64(1)<<(seq%64)
	for uint64(len(*s)) <= i {
		*s = append(*s, 0)
	}
	if (*s)[i]&bit != 0 {
		return true
	}
	(*s)[i] |= bit
	return false
}
