// Package pageviews counts page views per URL in tumbling event-time
// windows: events come from a JetStream stream, the counts live in keyed
// state, and each window's count goes to another JetStream stream once the
// window closes, with the record ID (and a hash of the message) as
// Nats-Msg-Id, so that under
// exactly-once each window is delivered once. `ackflow run pageviews` runs
// it on an embedded server with generated events.
//
// The topology: views (JetStream spout) -> route (one task: splits events
// from the end-of-input marker, keeping the stream's order) -> window
// (keyed state, Fields by url; the marker reaches every task through All)
// -> publish (JetStream sink).
//
// A window closes when the task's watermark, the latest event time it saw
// less the allowed lateness, passes its end. Its count is emitted from the
// input that moved the watermark, anchored to it, so the result is part of
// a tree and a checkpoint never falls between a window's state being
// dropped and its result being delivered; the record ID names the window,
// so a result emitted again after a rollback is the same record. An event
// for a window already closed is late: it is counted (Job.Late) and logged,
// never added silently to a window already delivered. Replays of failed
// trees come out of event-time order, so the allowed lateness must cover
// them; exactly-once rollbacks replay in order from the checkpoint.
package pageviews

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/sinks"
	"github.com/ackflow/ackflow/sources"
	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Streams and subjects the example uses.
const (
	EventsStream  = "PAGEVIEWS"
	EventsSubject = "pageviews.events"
	CountsStream  = "PAGEVIEWS_COUNTS"
	CountsSubject = "pageviews.counts"
)

// Event is one page view at a time in Unix milliseconds.
type Event struct {
	URL  string
	Time int64
}

// Window names one URL's count in one window, by the window's start.
type Window struct {
	URL   string
	Start int64
}

// Config tunes the topology.
type Config struct {
	URL      string        // NATS server with JetStream
	Window   time.Duration // window length in event time (default 10 s)
	Lateness time.Duration // how far behind the latest event time an event may come (default 30 s)
	Tasks    int           // parallelism of window and publish (default 2)
	// EventsPerSec paces the reading of the events (0: as fast as flow
	// control allows), so that a demonstration lasts.
	EventsPerSec float64
}

func (c *Config) setDefaults() {
	if c.Window == 0 {
		c.Window = 10 * time.Second
	}
	if c.Lateness == 0 {
		c.Lateness = 30 * time.Second
	}
	if c.Tasks == 0 {
		c.Tasks = 2
	}
}

// Job is a built topology and the count of late events it saw.
type Job struct {
	Topology *topology.Topology
	late     atomic.Int64
}

// Late is the number of events that came after their window closed.
func (j *Job) Late() int64 { return j.late.Load() }

// New builds the topology.
func New(cfg Config) (*Job, error) {
	cfg.setDefaults()
	if cfg.Window < time.Millisecond || cfg.Lateness < 0 {
		return nil, fmt.Errorf("pageviews: window %v and lateness %v: the window must be at least 1ms and the lateness not negative", cfg.Window, cfg.Lateness)
	}
	job := &Job{}
	views := sources.JetStreamConfig{URL: cfg.URL, Stream: EventsStream, Decode: decode, StopAtEnd: true, MessagesPerSec: cfg.EventsPerSec}
	if err := views.Validate(); err != nil {
		return nil, fmt.Errorf("pageviews: %w", err)
	}
	window, lateness := cfg.Window.Milliseconds(), cfg.Lateness.Milliseconds()
	b := topology.NewBuilder("pageviews")
	b.Spout("views", func() topology.Spout { return sources.NewJetStream(views) }, 1).Outputs("url", "time")
	// One route task, so that each window task gets the events in the
	// stream's order: with several, their batches would interleave and
	// move event time back and forth by a batch at a time.
	b.BasicBolt("route", func() topology.BasicBolt { return route{} }, 1).
		Input("views", topology.Shuffle()).Outputs("url", "time").Stream("marks", "time")
	b.BasicBolt("window", func() topology.BasicBolt { return &windowBolt{window: window, lateness: lateness, late: &job.late} }, cfg.Tasks).
		Input("route", topology.Fields("url")).InputStream("route", "marks", topology.All()).
		Outputs("url", "start", "count").KeyedState()
	b.Bolt("publish", sinks.NewJetStream(sinks.JetStreamConfig{URL: cfg.URL, Subject: CountsSubject, Stream: CountsStream, Encode: encodeCount}), cfg.Tasks).
		Input("window", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		return nil, err
	}
	job.Topology = topo
	return job, nil
}

// endOfInput is the event time of the marker that closes every window.
const endOfInput = math.MaxInt64

// decode reads "url time" messages; the marker has no URL.
func decode(m jetstream.Msg) (topology.Values, error) {
	url, ts, ok := strings.Cut(string(m.Data()), " ")
	t, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("pageviews: message %q is not \"url unix-ms\"", m.Data())
	}
	return topology.Values{url, t}, nil
}

func encodeCount(t *topology.Tuple) ([]byte, error) {
	return fmt.Appendf(nil, "%s %d %d", t.Values[0], t.Values[1], t.Values[2]), nil
}

// route sends events to the window tasks by URL and the end-of-input
// marker to all of them.
type route struct{}

func (route) Prepare(topology.TaskContext) error { return nil }
func (route) Cleanup() error                     { return nil }

func (route) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	url, err := in.String(0)
	if err != nil {
		return err
	}
	ts, err := in.Int(1)
	if err != nil {
		return err
	}
	if url == "" {
		return out.EmitTo("marks", topology.Values{ts})
	}
	return out.Emit(topology.Values{url, ts})
}

// windowBolt counts events per URL and window in keyed state.
type windowBolt struct {
	window, lateness int64
	late             *atomic.Int64
	counts, meta     *topology.Counters
	tc               topology.TaskContext
}

// The watermark lives in keyed state too, so that it is restored with the
// counts it closed windows for.
const watermarkKey = "watermark"

func (w *windowBolt) Prepare(tc topology.TaskContext) error {
	w.tc, w.counts, w.meta = tc, tc.State.Counters("counts"), tc.State.Counters("meta")
	return nil
}

func (w *windowBolt) Cleanup() error { return nil }

func (w *windowBolt) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	if in.Stream == "marks" {
		return w.advance(endOfInput, out)
	}
	url, err := in.String(0)
	if err != nil {
		return err
	}
	ts, err := in.Int(1)
	if err != nil {
		return err
	}
	start := ts - mod(ts, w.window)
	if wm := w.meta.Get(watermarkKey); wm > 0 && start+w.window <= wm {
		// Its window was delivered already: counted and logged, not lost
		// without a trace, and not added to a result sent before.
		if n := w.late.Add(1); n == 1 || n%1000 == 0 {
			w.tc.Logger.Warn().Str("url", url).Int64("time", ts).Int64("late_events", n).Msg("an event came after its window closed; raise the allowed lateness")
		}
		return nil
	}
	w.counts.Add(key(url, start), 1)
	return w.advance(ts-w.lateness, out)
}

// advance moves the watermark to wm if that is later, and emits and drops
// the windows that closed.
func (w *windowBolt) advance(wm int64, out topology.BasicCollector) error {
	old := w.meta.Get(watermarkKey)
	if wm <= old {
		return nil
	}
	w.meta.Add(watermarkKey, wm-old)
	if wm != endOfInput && old > 0 && (wm-mod(wm, w.window)) == (old-mod(old, w.window)) {
		return nil // no window boundary crossed
	}
	var closed []string
	w.counts.Range(func(k string, _ int64) bool {
		if _, start := parseKey(k); start+w.window <= wm {
			closed = append(closed, k)
		}
		return true
	})
	for _, k := range closed {
		url, start := parseKey(k)
		id := topology.HashID("pageviews", url, strconv.FormatInt(start, 10))
		if err := out.EmitWithID(topology.DefaultStream, id, topology.Values{url, start, w.counts.Get(k)}); err != nil {
			return err
		}
		w.counts.Delete(k)
	}
	return nil
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func key(url string, start int64) string { return url + "\x00" + strconv.FormatInt(start, 10) }

func parseKey(k string) (string, int64) {
	url, s, _ := strings.Cut(k, "\x00")
	start, _ := strconv.ParseInt(s, 10, 64)
	return url, start
}

// Generate makes n page views of 200 pages (a few popular, most rare) at
// about 10 per event-time second, each up to 2 s out of order, from a
// seed: the same seed makes the same events.
func Generate(n int, seed uint64) []Event {
	rng := rand.New(rand.NewPCG(seed, 7))
	zipf := rand.NewZipf(rng, 1.3, 1, 199)
	const base = 1_700_000_000_000
	events := make([]Event, n)
	for i := range events {
		events[i] = Event{URL: fmt.Sprintf("/page/%d", zipf.Uint64()), Time: base + int64(i)*100 + rng.Int64N(4001) - 2000}
	}
	return events
}

// Oracle counts events per URL and window.
func Oracle(events []Event, window time.Duration) map[Window]int64 {
	w := window.Milliseconds()
	m := map[Window]int64{}
	for _, e := range events {
		m[Window{e.URL, e.Time - mod(e.Time, w)}]++
	}
	return m
}

// CreateStreams makes the events and counts streams, empty.
func CreateStreams(ctx context.Context, js jetstream.JetStream) error {
	for _, c := range []jetstream.StreamConfig{
		{Name: EventsStream, Subjects: []string{EventsSubject}},
		{Name: CountsStream, Subjects: []string{CountsSubject}, Duplicates: 2 * time.Minute},
	} {
		if err := js.DeleteStream(ctx, c.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("pageviews: removing stream %s: %w", c.Name, err)
		}
		if _, err := js.CreateStream(ctx, c); err != nil {
			return fmt.Errorf("pageviews: creating stream %s: %w", c.Name, err)
		}
	}
	return nil
}

// Publish writes the events, then the marker that ends the input. A
// publish waits while the client already has its maximum of
// unacknowledged messages out (the client gives such a wait up after
// 200 ms; a busy server is no reason to fail), and every event must be
// acknowledged by the stream before the marker goes out, so that the
// marker is the last message and no event is missing before it.
func Publish(ctx context.Context, js jetstream.JetStream, events []Event) error {
	publish := func(i int, e Event) (jetstream.PubAckFuture, error) {
		f, err := sinks.PublishAsync(ctx, js, &nats.Msg{Subject: EventsSubject, Data: fmt.Appendf(nil, "%s %d", e.URL, e.Time)})
		if err != nil {
			err = fmt.Errorf("pageviews: publishing event %d: %w", i, err)
		}
		return f, err
	}
	wait := func(futures []jetstream.PubAckFuture, first int) error {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return fmt.Errorf("pageviews: publishing the events: %w", ctx.Err())
		}
		for i, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("pageviews: the stream did not store event %d: %w; publish again into a new stream (CreateStreams)", first+i, err)
			}
		}
		return nil
	}
	futures := make([]jetstream.PubAckFuture, len(events))
	for i, e := range events {
		f, err := publish(i, e)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	if err := wait(futures, 0); err != nil {
		return err
	}
	f, err := publish(len(events), Event{Time: endOfInput})
	if err != nil {
		return err
	}
	return wait([]jetstream.PubAckFuture{f}, len(events))
}

// ReadCounts reads every window count delivered so far, and how many
// windows were delivered more than once.
func ReadCounts(ctx context.Context, js jetstream.JetStream) (map[Window]int64, int, error) {
	s, err := js.Stream(ctx, CountsStream)
	if err != nil {
		return nil, 0, fmt.Errorf("pageviews: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("pageviews: %w", err)
	}
	counts, dups := map[Window]int64{}, 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			return nil, 0, fmt.Errorf("pageviews: reading count %d: %w", seq, err)
		}
		var w Window
		var n int64
		if _, err := fmt.Sscanf(string(m.Data), "%s %d %d", &w.URL, &w.Start, &n); err != nil {
			return nil, 0, fmt.Errorf("pageviews: count %d is %q: %w", seq, m.Data, err)
		}
		if _, ok := counts[w]; ok {
			dups++
		}
		counts[w] += n
	}
	return counts, dups, nil
}
