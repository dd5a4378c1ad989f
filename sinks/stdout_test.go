package sinks

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ackflow/ackflow/topology"
)

func TestStdoutWritesEachInputToTheWriter(t *testing.T) {
	var buf bytes.Buffer
	c := newCollector()
	s := NewStdout(StdoutConfig{Writer: &buf})()
	mustOK(t, s.Prepare(topology.TaskContext{Component: "print"}, c))
	s.Execute(tuple(1, "a", int64(1)))
	s.Execute(&topology.Tuple{Stream: topology.TickStream})
	s.Execute(tuple(2, "b", 2.5))
	mustOK(t, s.Cleanup())
	if got, want := buf.String(), "a\t1\nb\t2.5\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
	if acked, failed := c.counts(); acked != 2 || failed != 0 {
		t.Fatalf("%d acked and %d failed, want 2 acked", acked, failed)
	}
}

// lines is a writer that fails when told to, and is unsafe without the
// sinks' lock, so that the race detector sees unserialised writes.
type lines struct {
	buf  bytes.Buffer
	fail bool
}

func (l *lines) Write(p []byte) (int, error) {
	if l.fail {
		return 0, errors.New("disk full")
	}
	return l.buf.Write(p)
}

func TestStdoutTasksSharingAWriterDoNotInterleave(t *testing.T) {
	w := &lines{}
	factory := NewStdout(StdoutConfig{Writer: w})
	var wg sync.WaitGroup
	for task := range 4 {
		s := factory()
		mustOK(t, s.Prepare(topology.TaskContext{Component: "print", Index: task}, newCollector()))
		wg.Go(func() {
			for i := range 200 {
				s.Execute(tuple(uint64(i), strings.Repeat("x", 100), int64(task)))
			}
		})
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(w.buf.String(), "\n"), "\n")
	if len(got) != 800 {
		t.Fatalf("%d lines, want 800", len(got))
	}
	for _, l := range got {
		if len(l) != 102 {
			t.Fatalf("a line was cut by another: %q", l)
		}
	}
}

func TestStdoutFailsAnInputItCannotPrint(t *testing.T) {
	c := newCollector()
	s := NewStdout(StdoutConfig{Writer: &lines{fail: true}})()
	mustOK(t, s.Prepare(topology.TaskContext{Component: "print"}, c))
	s.Execute(tuple(9, "a"))
	if err := c.anyFailure(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("the failure: %v", err)
	}
}
