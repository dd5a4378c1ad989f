package workers_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/embednats/natstest"
	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct{ testbuf.Buffer }

func (l *logBuffer) lines() []string { return l.Lines() }

func (l *logBuffer) count(sub string) int {
	n := 0
	for _, line := range l.lines() {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

// chatty is a bolt that logs at debug level every 20th input.
type chatty struct {
	log zerolog.Logger
	out topology.Collector
	n   int
}

func (c *chatty) Prepare(tc topology.TaskContext, out topology.Collector) error {
	c.log, c.out = tc.Logger, out
	return nil
}

func (c *chatty) Execute(in *topology.Tuple) {
	if c.n++; c.n%20 == 0 {
		c.log.Debug().Int("inputs", c.n).Msg("chatty debug line")
	}
	c.out.Ack(in)
}

func (c *chatty) Cleanup() error { return nil }

// TestLogLevelChangesWhileATopologyRuns changes a running topology's log
// level through its submission, as ackflow loglevel does: the tasks'
// loggers, made before the change, log at debug level after it and stop
// again after the level is set back.
func TestLogLevelChangesWhileATopologyRuns(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	js, stop := natstest.JetStream(t)
	t.Cleanup(stop)
	url := js.Conn().ConnectedUrl()
	ctx := context.Background()
	reg, err := cluster.NewKVRegistry(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	const name = "chatty"
	build := func(map[string]string) (*topology.Topology, error) {
		b := topology.NewBuilder(name)
		b.Spout("numbers", func() topology.Spout { return &rewindable{numbers{n: 1_000_000, d: 10 * time.Minute}} }, 1).Outputs("n")
		b.Bolt("log", func() topology.Bolt { return &chatty{} }, 1).Input("numbers", topology.Shuffle())
		return b.Build()
	}
	var logs logBuffer
	rt := workers.DefaultConfig()
	rt.Logger = workers.NewLogger(&logs, zerolog.InfoLevel)
	nodeCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- workers.RunNode(nodeCtx, workers.NodeConfig{Name: "n1", NATSURL: url, Runtime: rt, Members: nodeTiming,
			StatusEvery: 100 * time.Millisecond, Topologies: map[string]func(map[string]string) (*topology.Topology, error){name: build}})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	if err := reg.Submit(ctx, cluster.Spec{Name: name, Guarantee: "at-least-once"}); err != nil {
		t.Fatal(err)
	}
	waitLogs := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 30s; logs:\n%s", what, strings.Join(logs.lines(), "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	setLevel := func(level string) {
		t.Helper()
		spec, rev, err := reg.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		spec.LogLevel = level
		if _, err := reg.Update(ctx, spec, rev); err != nil {
			t.Fatal(err)
		}
	}
	waitLogs("the topology runs", func() bool { return logs.count(`"message":"joined a generation"`) > 0 })
	time.Sleep(time.Second)
	if n := logs.count("chatty debug line"); n != 0 {
		t.Fatalf("%d debug lines at info level", n)
	}
	setLevel("debug")
	waitLogs("debug lines after loglevel debug", func() bool { return logs.count("chatty debug line") >= 3 })
	if logs.count(`"to":"debug"`) == 0 {
		t.Fatal("the worker did not log the change of level")
	}
	setLevel("")
	waitLogs("the level back at info", func() bool { return logs.count(`"to":"info"`) > 0 })
	before := logs.count("chatty debug line")
	time.Sleep(time.Second)
	if after := logs.count("chatty debug line"); after > before+1 { // one may be on its way
		t.Fatalf("%d debug lines after the level went back to info", after-before)
	}
}

// TestNoPerRecordLogsAtInfo runs word count over 3,000 lines of random
// text at-least-once at info level, through failures, lost and duplicated
// frames and a crash: the counts are exact, and the log is a few JSON
// lines, each with its topology, not a line per record.
func TestNoPerRecordLogsAtInfo(t *testing.T) {
	defer goleak.VerifyNone(t)
	input := filepath.Join(t.TempDir(), "text.txt")
	f, err := os.Create(input)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wordcount.RandomText(f, 3000, 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Paced over about 1.5 s, so that the run sees a few crashes however
	// fast the machine.
	job, err := wordcount.New(wordcount.Config{Input: input, LinesPerSec: 2000})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	cfg := workers.DefaultConfig()
	cfg.Workers = 3
	cfg.Logger = workers.NewLogger(&logs, zerolog.InfoLevel)
	cfg.Chaos = chaos.Config{Drop: 0.02, Dup: 0.02, Fail: 0.01, CrashEvery: 300 * time.Millisecond, Seed: 3}
	sum, err := workers.RunLocal(context.Background(), job.Topology, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Chaos.InputsFailed == 0 || sum.Crashes == 0 {
		t.Fatalf("the chaos did not happen: %+v, %d crashes", sum.Chaos, sum.Crashes)
	}
	if got := job.Counts.Map(); !maps.Equal(got, want) {
		t.Fatalf("word count is not exact: %d distinct words, want %d", len(got), len(want))
	}
	// A crash is worth a few lines (the crash, the replacement, where its
	// spouts read on; in an in-process cluster the node's return and its
	// slots' moves); records are worth none.
	lines := logs.lines()
	if len(lines) > 20+10*sum.Crashes {
		byMessage := map[string]int{}
		for _, line := range lines {
			var e struct{ Level, Message string }
			json.Unmarshal([]byte(line), &e)
			byMessage[e.Level+": "+e.Message]++
		}
		t.Fatalf("%d log lines for %d records and %d crashes at info level: %v", len(lines), sum.Records, sum.Crashes, byMessage)
	}
	for _, line := range lines {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
		if e["topology"] != "wordcount" || e["level"] == nil || e["time"] == nil {
			t.Fatalf("a log line lacks its topology, level or time: %q", line)
		}
		// A key written twice is invalid for some log stores (the nodes'
		// runners named the topology again once).
		if n := strings.Count(line, `"topology":`); n != 1 {
			t.Fatalf("a log line names its topology %d times: %q", n, line)
		}
	}
	t.Logf("%d log lines for %d records, %d failed inputs, %d crashes", len(lines), sum.Records, sum.Chaos.InputsFailed, sum.Crashes)
}

// TestProgressCountsReplays: the progress a run reports (the run
// command's progress line) includes the replays so far, which reach the
// summary's count by the end.
func TestProgressCountsReplays(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := topology.NewBuilder("progress")
	b.Spout("numbers", func() topology.Spout { return &numbers{n: 20_000, d: time.Second} }, 1).Outputs("n")
	b.Bolt("pass", func() topology.Bolt { return &pass{} }, 2).Input("numbers", topology.Shuffle())
	topo := build(t, b)
	cfg := workers.DefaultConfig()
	cfg.Logger = zerolog.Nop()
	cfg.Chaos = chaos.Config{Fail: 0.02, Seed: 5}
	cfg.ProgressEvery = 20 * time.Millisecond
	var mu sync.Mutex
	var most int64
	cfg.Progress = func(p workers.Progress) {
		mu.Lock()
		most = max(most, p.Replayed)
		mu.Unlock()
	}
	sum, err := workers.RunLocal(context.Background(), topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var replayed int64
	for _, c := range sum.Components {
		replayed += c.Replayed
	}
	mu.Lock()
	defer mu.Unlock()
	if replayed == 0 || most == 0 || most > replayed {
		t.Fatalf("progress showed %d replays at most; the summary counts %d", most, replayed)
	}
}
