package pageviews_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/embednats/natstest"
	"github.com/ackflow/ackflow/examples/pageviews"
	"github.com/ackflow/ackflow/workers"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// TestExactWindowCountsUnderChaosAndCrashes: exactly-once, with frames
// lost, duplicated and reordered and a worker crash every 1.5 s that may
// hit any worker, every window's count is delivered once and equals the
// oracle's.
func TestExactWindowCountsUnderChaosAndCrashes(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := natstest.JetStream(t)
	defer stop()
	url := js.Conn().ConnectedUrl()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := pageviews.Generate(40000, 3)
	if err := pageviews.CreateStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	if err := pageviews.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	job, err := pageviews.New(pageviews.Config{URL: url, EventsPerSec: 10000})
	if err != nil {
		t.Fatal(err)
	}
	cfg := workers.DefaultConfig()
	cfg.Guarantee, cfg.Workers, cfg.NATSURL = workers.ExactlyOnce, 3, url
	cfg.CheckpointEvery = 200 * time.Millisecond
	cfg.Chaos = chaos.Config{Drop: 0.03, Dup: 0.02, Reorder: 0.05, CrashEvery: 1500 * time.Millisecond, Seed: 5}
	sum, err := workers.RunLocal(ctx, job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; %d crashes, %d rollbacks, %d checkpoints; %d late events", sum.Duration.Round(time.Millisecond), sum.Crashes, sum.Checkpoints.Rollbacks, sum.Checkpoints.Taken, job.Late())
	if sum.Crashes == 0 || sum.Chaos.FramesDropped == 0 {
		t.Fatalf("%d crashes, %d frames dropped: the test proves nothing", sum.Crashes, sum.Chaos.FramesDropped)
	}
	got, dups, err := pageviews.ReadCounts(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	want := pageviews.Oracle(events, 10*time.Second)
	if dups != 0 || job.Late() != 0 {
		t.Fatalf("%d windows delivered twice, %d late events", dups, job.Late())
	}
	for w, n := range want {
		if got[w] != n {
			t.Fatalf("window %v: counted %d, want %d", w, got[w], n)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d windows delivered, want %d", len(got), len(want))
	}
	t.Logf("%d windows exact", len(want))
}

// TestPublishStoresEveryEventBeforeTheMarker publishes through a client
// that allows one unacknowledged message at a time, so that nearly every
// publish waits: every event is stored, in order, and the marker that
// ends the input is the last message.
func TestPublishStoresEveryEventBeforeTheMarker(t *testing.T) {
	defer goleak.VerifyNone(t)
	base, stop := natstest.JetStream(t)
	defer stop()
	js, err := jetstream.New(base.Conn(), jetstream.WithPublishAsyncMaxPending(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := pageviews.Generate(3000, 3)
	if err := pageviews.CreateStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	if err := pageviews.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, pageviews.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(events)+1) {
		t.Fatalf("the stream holds %d messages, want %d events and the marker", info.State.Msgs, len(events)+1)
	}
	for i, seq := range []uint64{info.State.FirstSeq, info.State.FirstSeq + uint64(len(events)) - 1, info.State.LastSeq} {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(" %d", int64(math.MaxInt64)) // the marker: no URL, the last time
		if i < 2 {
			e := events[min(i*len(events), len(events)-1)]
			want = fmt.Sprintf("%s %d", e.URL, e.Time)
		}
		if string(m.Data) != want {
			t.Fatalf("message %d is %q, want %q", seq, m.Data, want)
		}
	}
}
