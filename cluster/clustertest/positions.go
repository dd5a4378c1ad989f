package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

type positionsOpener = func(t *testing.T) cluster.Positions

// RunPositions runs every Positions case; open is called once per case
// and must return a Positions without any position.
func RunPositions(t *testing.T, open func(t *testing.T) cluster.Positions) {
	cases(t, open, []namedCase[positionsOpener]{
		{"AbsentUntilWritten", absentPosition},
		{"PutIsCompareAndSet", positionCAS},
		{"TasksAreApart", positionsApart},
		{"InvalidTopologyNamesRefused", invalidPositionNames},
	})
}

func samplePosition(task int, at string) cluster.SpoutPosition {
	return cluster.SpoutPosition{Topology: "wc", Task: task, Submitted: time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC), Position: []byte(at)}
}

func putPosition(t *testing.T, s cluster.Positions, p cluster.SpoutPosition, rev uint64) uint64 {
	t.Helper()
	next, err := s.Put(context.Background(), p, rev)
	if err != nil {
		t.Fatalf("Put(task %d at %d): %v", p.Task, rev, err)
	}
	return next
}

func absentPosition(t *testing.T, open positionsOpener) {
	s := open(t)
	if _, rev, err := s.Get(context.Background(), "wc", 0); !errors.Is(err, cluster.ErrNotFound) || rev != 0 {
		t.Fatalf("a position never written: revision %d, %v; want ErrNotFound", rev, err)
	}
}

// positionCAS: a position is created once, updated from the revision
// read, and a write from a stale revision (another owner wrote since)
// fails with ErrConflict and changes nothing.
func positionCAS(t *testing.T, open positionsOpener) {
	s := open(t)
	ctx := context.Background()
	first := putPosition(t, s, samplePosition(0, "at 10"), 0)
	if _, err := s.Put(ctx, samplePosition(0, "at 11"), 0); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("creating a position that exists: %v, want ErrConflict", err)
	}
	second := putPosition(t, s, samplePosition(0, "at 20"), first)
	if _, err := s.Put(ctx, samplePosition(0, "at 15"), first); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("a write from a stale revision: %v, want ErrConflict", err)
	}
	got, rev, err := s.Get(ctx, "wc", 0)
	want := samplePosition(0, "at 20")
	if err != nil || rev != second || string(got.Position) != "at 20" || !got.Submitted.Equal(want.Submitted) || got.Topology != "wc" || got.Task != 0 {
		t.Fatalf("read back %+v at revision %d (%v), want %+v at %d", got, rev, err, want, second)
	}
}

func positionsApart(t *testing.T, open positionsOpener) {
	s := open(t)
	ctx := context.Background()
	putPosition(t, s, samplePosition(0, "zero"), 0)
	putPosition(t, s, samplePosition(1, "one"), 0)
	for task, want := range []string{"zero", "one"} {
		if got, _, err := s.Get(ctx, "wc", task); err != nil || string(got.Position) != want {
			t.Fatalf("task %d: %q, %v; want %q", task, got.Position, err, want)
		}
	}
	if _, _, err := s.Get(ctx, "other", 0); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("another topology's task 0: %v, want ErrNotFound", err)
	}
}

func invalidPositionNames(t *testing.T, open positionsOpener) {
	s := open(t)
	ctx := context.Background()
	for _, name := range []string{"", "a.b", "a b", "a*"} {
		p := samplePosition(0, "x")
		p.Topology = name
		if _, err := s.Put(ctx, p, 0); err == nil {
			t.Errorf("Put with topology %q succeeded", name)
		}
		if _, _, err := s.Get(ctx, name, 0); err == nil || errors.Is(err, cluster.ErrNotFound) {
			t.Errorf("Get with topology %q: %v, want a refusal", name, err)
		}
	}
	p := samplePosition(-1, "x")
	if _, err := s.Put(ctx, p, 0); err == nil {
		t.Error("Put of task -1 succeeded")
	}
}
