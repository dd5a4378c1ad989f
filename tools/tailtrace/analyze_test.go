package main

import (
	"bytes"
	"context"
	"runtime"
	rtrace "runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestAnalyze writes a trace with a collection, two slow trees close
// together right after it and one much later, and checks what analyze
// makes of them.
func TestAnalyze(t *testing.T) {
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runtime.GC()
	rtrace.Log(ctx, slowCategory, "6000") // started 6 ms before: during or just after the collection
	time.Sleep(5 * time.Millisecond)
	rtrace.Log(ctx, slowCategory, "7000")
	time.Sleep(150 * time.Millisecond) // well past gcShadow and spellGap
	rtrace.Log(ctx, slowCategory, "5000")
	rtrace.Log(ctx, "other", "1") // not a slow tree
	rtrace.Stop()

	rep, err := analyze(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.gcs) < 1 {
		t.Fatalf("no mark phase found; runtime.GC ran during the trace")
	}
	if len(rep.slow) != 3 {
		t.Fatalf("%d slow trees, want 3", len(rep.slow))
	}
	if rep.nearGC != 2 {
		t.Errorf("%d slow trees near a collection, want 2", rep.nearGC)
	}
	if len(rep.spells) != 2 || rep.spells[0].trees != 2 || rep.spells[1].trees != 1 {
		t.Errorf("spells %+v, want one of 2 trees and one of 1", rep.spells)
	}
	if w := rep.spells[0].worst; w < 0.0069 || w > 0.0071 {
		t.Errorf("worst of the first spell %.4f s, want 0.007", w)
	}
	var out strings.Builder
	rep.print(&out)
	for _, want := range []string{"slow trees (5ms or more): 3, of which 2", "spells (slow trees less than 20ms apart): 2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestAnalyzeRefusesGarbage(t *testing.T) {
	if _, err := analyze(strings.NewReader("not a trace")); err == nil {
		t.Fatal("analyze accepted a file that is not a trace")
	}
}

func TestKind(t *testing.T) {
	for stack, want := range map[string]string{
		"runtime.selectgo;github.com/ackflow/ackflow/workers.(*spoutExec).run;": "spout",
		"runtime.chanrecv;github.com/ackflow/ackflow/workers.(*boltExec).run;":  "bolt",
		"github.com/nats-io/nats-server/v2/server.(*client).readLoop;":          "nats-server",
		"github.com/nats-io/nats%2ego.(*Conn).readLoop;":                        "nats-client",
		"runtime.gcBgMarkWorker;":                                               "gc",
		"main.main;":                                                            "other",
	} {
		if got := kind(stack); got != want {
			t.Errorf("kind(%q) = %q, want %q", stack, got, want)
		}
	}
}
