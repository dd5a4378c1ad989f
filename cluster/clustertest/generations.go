package clustertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

type generationsOpener = func(t *testing.T) cluster.Generations

// RunGenerations runs every Generations case; open is called once per case
// and must return a Generations without any generation.
func RunGenerations(t *testing.T, open func(t *testing.T) cluster.Generations) {
	cases(t, open, []namedCase[generationsOpener]{
		{"FirstGeneration", firstGeneration},
		{"CurrentIsACopy", currentIsACopy},
		{"NextIsCompareAndSet", nextCAS},
		{"AmendMovesSlotsOnly", amendMoves},
		{"RacingLeadersOneWins", racingLeaders},
		{"WatchSendsCurrentThenNew", watchGenerations},
		{"Delete", deleteGenerations},
		{"InvalidTopologyNamesRefused", invalidGenerationNames},
	})
}

func sampleGeneration(topology string, number uint64) cluster.Generation {
	return cluster.Generation{
		Topology:    topology,
		Number:      number,
		Parallelism: map[string]int{"source": 1, "split": 2, "count": 3},
		Assignment:  map[int]string{0: "w1", 1: "w2", 2: "w1", 3: "w3", 4: "w2", 5: "w3"},
		RestoreFrom: 7 * number,
		Leader:      "w1",
		Created:     time.Date(2026, 3, 14, 15, 9, 26, int(number), time.UTC),
		Reason:      fmt.Sprintf("reason %d", number),
		Fingerprint: "f00d",
	}
}

func sameGeneration(a, b cluster.Generation) bool {
	if !a.Created.Equal(b.Created) {
		return false
	}
	a.Created, b.Created = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func next(t *testing.T, s cluster.Generations, g cluster.Generation, prevRev uint64) uint64 {
	t.Helper()
	rev, err := s.Next(context.Background(), g, prevRev)
	if err != nil {
		t.Fatalf("Next(%s generation %d at %d): %v", g.Topology, g.Number, prevRev, err)
	}
	return rev
}

func current(t *testing.T, s cluster.Generations, topology string) (cluster.Generation, uint64) {
	t.Helper()
	g, rev, err := s.Current(context.Background(), topology)
	if err != nil {
		t.Fatalf("Current(%s): %v", topology, err)
	}
	return g, rev
}

func firstGeneration(t *testing.T, open generationsOpener) {
	s := open(t)
	if _, _, err := s.Current(context.Background(), "wc"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Current before the first generation returned %v, want ErrNotFound", err)
	}
	rev := next(t, s, sampleGeneration("wc", 1), 0)
	got, gotRev := current(t, s, "wc")
	if !sameGeneration(got, sampleGeneration("wc", 1)) || gotRev != rev || rev == 0 {
		t.Fatalf("Current = %+v at %d, want generation 1 as written at %d", got, gotRev, rev)
	}
}

// currentIsACopy: what Current returns may be changed without changing
// what the next Current returns, and a write is seen at once, however
// often the generation was read before.
func currentIsACopy(t *testing.T, open generationsOpener) {
	s := open(t)
	rev := next(t, s, sampleGeneration("wc", 1), 0)
	for range 3 {
		g, _ := current(t, s, "wc")
		g.Assignment[0], g.Parallelism["split"] = "elsewhere", 99
		g.Moves = map[string]cluster.Move{"w1": {To: "w9", Incarnation: 1}}
	}
	if got, _ := current(t, s, "wc"); !sameGeneration(got, sampleGeneration("wc", 1)) {
		t.Fatalf("Current = %+v after a caller changed what it got; want generation 1 as written", got)
	}
	next(t, s, sampleGeneration("wc", 2), rev)
	if got, _ := current(t, s, "wc"); !sameGeneration(got, sampleGeneration("wc", 2)) {
		t.Fatalf("Current = %+v after generation 2 was written, want generation 2", got)
	}
}

func nextCAS(t *testing.T, open generationsOpener) {
	s := open(t)
	ctx := context.Background()
	if _, err := s.Next(ctx, sampleGeneration("wc", 2), 0); err == nil || errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("a first generation numbered 2 returned %v, want an error about its number", err)
	}
	rev1 := next(t, s, sampleGeneration("wc", 1), 0)
	if _, err := s.Next(ctx, sampleGeneration("wc", 1), 0); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("a second first generation returned %v, want ErrConflict", err)
	}
	rev2 := next(t, s, sampleGeneration("wc", 2), rev1)
	if rev2 <= rev1 {
		t.Fatalf("generation 2 has revision %d after %d, want a larger one", rev2, rev1)
	}
	if _, err := s.Next(ctx, sampleGeneration("wc", 2), rev1); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Next at a stale revision returned %v, want ErrConflict", err)
	}
	if _, err := s.Next(ctx, sampleGeneration("wc", 4), rev2); err == nil || errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("generation 4 after 2 returned %v, want an error about its number", err)
	}
	if _, err := s.Next(ctx, sampleGeneration("wc", 2), rev2); err == nil || errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("generation 2 again after 2 returned %v, want an error about its number", err)
	}
	if g, rev := current(t, s, "wc"); g.Number != 2 || rev != rev2 {
		t.Fatalf("after refused writes Current is generation %d at %d, want 2 at %d", g.Number, rev, rev2)
	}
	if _, err := s.Next(ctx, sampleGeneration("other", 2), rev2); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Next of a topology without a generation at another topology's revision returned %v, want ErrConflict", err)
	}
}

// amendMoves: Amend writes moves of slots over the current generation
// (same number) by compare-and-set, and refuses any other change.
func amendMoves(t *testing.T, open generationsOpener) {
	s := open(t)
	ctx := context.Background()
	rev1 := next(t, s, sampleGeneration("wc", 1), 0)
	watch, err := s.Watch(background(t), "wc")
	if err != nil {
		t.Fatal(err)
	}
	receive(t, watch, 5*time.Second, "generation 1", func(g cluster.Generation) bool { return g.Number == 1 && len(g.Moves) == 0 })
	moved := sampleGeneration("wc", 1)
	moved.Moves = map[string]cluster.Move{"w2": {To: "w3", Incarnation: 1, At: time.Date(2026, 3, 14, 15, 9, 27, 0, time.UTC)}}
	rev2, err := s.Amend(ctx, moved, rev1)
	if err != nil {
		t.Fatalf("Amend with a move: %v", err)
	}
	got, gotRev := current(t, s, "wc")
	if !sameGeneration(got, moved) || gotRev != rev2 || rev2 <= rev1 {
		t.Fatalf("after Amend Current = %+v at %d, want %+v at %d", got, gotRev, moved, rev2)
	}
	if got.Owner("w2") != "w3" || got.Owner("w1") != "w1" {
		t.Fatalf("owners after the move: w2's slot on %s, w1's on %s", got.Owner("w2"), got.Owner("w1"))
	}
	receive(t, watch, 5*time.Second, "the amended generation 1", func(g cluster.Generation) bool { return g.Number == 1 && g.Moves["w2"].To == "w3" })
	if _, err := s.Amend(ctx, moved, rev1); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Amend at a stale revision returned %v, want ErrConflict", err)
	}
	bad := map[string]func(g *cluster.Generation){
		"another number":         func(g *cluster.Generation) { g.Number = 2 },
		"another assignment":     func(g *cluster.Generation) { g.Assignment = map[int]string{0: "w1"} },
		"another parallelism":    func(g *cluster.Generation) { g.Parallelism = map[string]int{"source": 2} },
		"another restore point":  func(g *cluster.Generation) { g.RestoreFrom++ },
		"an incarnation back":    func(g *cluster.Generation) { g.Moves = nil },
		"a slot nobody has":      func(g *cluster.Generation) { g.Moves["w9"] = cluster.Move{To: "w1", Incarnation: 1} },
		"a move to a bad name":   func(g *cluster.Generation) { g.Moves["w1"] = cluster.Move{To: "w 1", Incarnation: 1} },
		"incarnation 0":          func(g *cluster.Generation) { g.Moves["w1"] = cluster.Move{To: "w2", Incarnation: 0} },
		"an incarnation too big": func(g *cluster.Generation) { g.Moves["w1"] = cluster.Move{To: "w2", Incarnation: 1 << 20} },
	}
	for what, change := range bad {
		g := sampleGeneration("wc", 1)
		g.Moves = map[string]cluster.Move{"w2": moved.Moves["w2"]}
		change(&g)
		if _, err := s.Amend(ctx, g, rev2); err == nil || errors.Is(err, cluster.ErrConflict) {
			t.Fatalf("an amendment with %s returned %v, want an error about it", what, err)
		}
	}
	again := sampleGeneration("wc", 1)
	again.Moves = map[string]cluster.Move{"w2": {To: "w1", Incarnation: 2}, "w3": {To: "w1", Incarnation: 1}}
	if _, err := s.Amend(ctx, again, rev2); err != nil {
		t.Fatalf("a second move of w2's slot and a first of w3's: %v", err)
	}
	if _, err := s.Amend(ctx, sampleGeneration("other", 1), rev2); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Amend of a topology without a generation returned %v, want ErrConflict", err)
	}
}

func racingLeaders(t *testing.T, open generationsOpener) {
	const n = 8
	s := open(t)
	rev1 := next(t, s, sampleGeneration("wc", 1), 0)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			g := sampleGeneration("wc", 2)
			g.Leader = fmt.Sprintf("w%d", i)
			_, errs[i] = s.Next(context.Background(), g, rev1)
		})
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		switch {
		case err == nil && winner == "":
			winner = fmt.Sprintf("w%d", i)
		case err == nil:
			t.Fatalf("two leaders wrote generation 2 at the same revision: %s and w%d", winner, i)
		case !errors.Is(err, cluster.ErrConflict):
			t.Fatalf("a losing leader got %v, want ErrConflict", err)
		}
	}
	if winner == "" {
		t.Fatalf("no leader wrote generation 2")
	}
	if g, _ := current(t, s, "wc"); g.Leader != winner || g.Number != 2 {
		t.Fatalf("Current is generation %d of %s, want 2 of the winner %s", g.Number, g.Leader, winner)
	}
}

func watchGenerations(t *testing.T, open generationsOpener) {
	s := open(t)
	ctx := background(t)
	rev := next(t, s, sampleGeneration("wc", 1), 0)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := s.Watch(wctx, "wc")
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Watch(wctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	anyGen := func(cluster.Generation) bool { return true }
	if g, _ := receive(t, ch, 5*time.Second, "the current generation", anyGen); !sameGeneration(g, sampleGeneration("wc", 1)) {
		t.Fatalf("the watch sent %+v first, want generation 1", g)
	}
	next(t, s, sampleGeneration("wc2", 1), 0) // a name that starts with wc
	rev = next(t, s, sampleGeneration("wc", 2), rev)
	next(t, s, sampleGeneration("wc", 3), rev)
	// Generation 2 may be skipped: a bucket that keeps only the latest
	// value of a key drops it when 3 is written before the watch sent it
	// (Watch says so). What is sent comes in order, and 3 comes.
	for last := uint64(1); last < 3; {
		g, _ := receive(t, ch, 5*time.Second, "a new generation", anyGen)
		if g.Number <= last || !sameGeneration(g, sampleGeneration("wc", g.Number)) {
			t.Fatalf("the watch sent %+v after generation %d, want a newer generation of wc", g, last)
		}
		last = g.Number
	}
	quiet(t, fresh, 200*time.Millisecond, "a topology without generations has nothing to send")
	next(t, s, sampleGeneration("fresh", 1), 0)
	if g, _ := receive(t, fresh, 5*time.Second, "the first generation", anyGen); g.Topology != "fresh" || g.Number != 1 {
		t.Fatalf("the watch of a new topology sent %+v, want its generation 1", g)
	}
	stop()
	closes(t, ch, 5*time.Second)
	closes(t, fresh, 5*time.Second)
}

func deleteGenerations(t *testing.T, open generationsOpener) {
	s := open(t)
	ctx := context.Background()
	rev := next(t, s, sampleGeneration("wc", 1), 0)
	next(t, s, sampleGeneration("wc", 2), rev)
	for range 2 { // a second Delete is not an error
		if err := s.Delete(ctx, "wc"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Current(ctx, "wc"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Current after Delete returned %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "never"); err != nil {
		t.Fatalf("Delete of a topology without generations: %v", err)
	}
	next(t, s, sampleGeneration("wc", 1), 0) // starts over
}

func invalidGenerationNames(t *testing.T, open generationsOpener) {
	s := open(t)
	ctx := context.Background()
	for _, name := range []string{"", "a.b", "a*", "a>", "a b"} {
		if _, err := s.Next(ctx, sampleGeneration(name, 1), 0); err == nil {
			t.Errorf("Next of topology %q succeeded, want an error about the name", name)
		}
		if _, _, err := s.Current(ctx, name); err == nil || errors.Is(err, cluster.ErrNotFound) {
			t.Errorf("Current(%q) = %v, want an error about the name", name, err)
		}
		if _, err := s.Watch(ctx, name); err == nil {
			t.Errorf("Watch(%q) succeeded, want an error about the name", name)
		}
	}
}
