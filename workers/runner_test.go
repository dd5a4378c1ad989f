package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/cluster"
)

// TestJoinEndsWhenANewerGenerationIsOut: the context of a join of
// generation 3 lives while 3 is the newest generation seen, ends as soon
// as a newer one is, and ends when the join returns.
func TestJoinEndsWhenANewerGenerationIsOut(t *testing.T) {
	r := &runner{}
	r.newest.Store(3)
	ctx, joined := r.untilNewer(context.Background(), 3)
	defer joined()
	select {
	case <-ctx.Done():
		t.Fatal("the join's context ended while its generation is the newest")
	case <-time.After(200 * time.Millisecond):
	}
	r.newest.Store(4)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the join's context lives on though generation 4 is out")
	}
	ctx, joined = r.untilNewer(context.Background(), 4)
	joined()
	if ctx.Err() == nil {
		t.Fatal("the join's context lives on after the join returned")
	}
}

// TestRecoveryPolicy: the one policy both modes follow when a worker slot
// dies.
func TestRecoveryPolicy(t *testing.T) {
	for _, c := range []struct {
		g                      Guarantee
		checkpoints, stateless bool
		rollsBack              bool
	}{
		{AtLeastOnce, true, true, false},
		{AtLeastOnce, true, false, true},
		{ExactlyOnce, true, true, true},
		{ExactlyOnce, true, false, true},
		{AtLeastOnce, false, false, false}, // local mode without checkpoints: nothing to restore
		{AtMostOnce, false, true, false},
	} {
		if got := rollsBack(c.g, c.checkpoints, c.stateless); got != c.rollsBack {
			t.Errorf("rollsBack(%v, checkpoints %v, stateless %v) = %v, want %v", c.g, c.checkpoints, c.stateless, got, c.rollsBack)
		}
	}
}

// TestLeaderMovesOnlyStatelessSlots: the leader's decision on the dead
// owners of a running generation's slots. With checkpoints it moves only
// stateless ones; without (at-most-once, or at-least-once without), every
// one, and names the stateful tasks that lose their state.
func TestLeaderMovesOnlyStatelessSlots(t *testing.T) {
	// Slots: w1 holds the spout (task 0), w2 and w3 only stateless tasks.
	tasks := []TaskRef{{ID: 0, Component: "s", Stateful: true}, {ID: 1}, {ID: 2}, {ID: 3}}
	gen := cluster.Generation{Topology: "t", Number: 4, Parallelism: map[string]int{"s": 1, "b": 3},
		Assignment: map[int]string{0: "w1", 1: "w2", 2: "w3", 3: "w3"}}
	began := &Leader{g: Generation{Number: 4}, began: time.Now()}
	alo := Config{Guarantee: AtLeastOnce, CheckpointEvery: time.Second}
	now := time.Now()
	l := &leading{lg: began}

	moved, dead, fresh, ok := l.move(gen, tasks, alo, gen.Parallelism, []string{"w1", "w3"}, true, now)
	if !ok || len(dead) != 1 || dead[0] != "w2" || len(fresh) != 0 {
		t.Fatalf("w2 (stateless) died: move = %v, dead %v, without state %v", ok, dead, fresh)
	}
	if m := moved.Moves["w2"]; m.Incarnation != 1 || (m.To != "w1" && m.To != "w3") || !m.At.Equal(now) {
		t.Fatalf("w2's slot moved as %+v", m)
	}
	if len(gen.Moves) != 0 {
		t.Fatal("move changed the generation it was given")
	}
	// The new owner dies in turn, and with it w3's own slot: both move,
	// w2's slot as its second incarnation.
	moved.Moves["w2"] = cluster.Move{To: "w3", Incarnation: 1}
	again, dead, _, ok := l.move(moved, tasks, alo, gen.Parallelism, []string{"w1"}, true, now)
	if !ok || len(dead) != 1 || dead[0] != "w3" || again.Moves["w2"] != (cluster.Move{To: "w1", Incarnation: 2, At: now}) || again.Moves["w3"].To != "w1" {
		t.Fatalf("w3 died with w2's slot: move = %v, dead %v, moves %+v", ok, dead, again.Moves)
	}
	for what, c := range map[string]struct {
		l     *leading
		cfg   Config
		names []string
		par   map[string]int
		begun bool
	}{
		"a stateful slot":           {l, alo, []string{"w2", "w3"}, gen.Parallelism, true},
		"exactly-once":              {l, Config{Guarantee: ExactlyOnce}, []string{"w1", "w3"}, gen.Parallelism, true},
		"a generation not begun":    {l, alo, []string{"w1", "w3"}, gen.Parallelism, false},
		"another generation's lead": {&leading{lg: &Leader{g: Generation{Number: 3}, began: now}}, alo, []string{"w1", "w3"}, gen.Parallelism, true},
		"no lead":                   {&leading{}, alo, []string{"w1", "w3"}, gen.Parallelism, true},
		"a pending rebalance":       {l, alo, []string{"w1", "w3"}, map[string]int{"s": 1, "b": 4}, true},
		"nobody dead":               {l, alo, []string{"w1", "w2", "w3"}, gen.Parallelism, true},
	} {
		if _, _, _, ok := c.l.move(gen, tasks, c.cfg, c.par, c.names, c.begun, now); ok {
			t.Errorf("%s: the leader moved a slot", what)
		}
	}
	for _, cfg := range []Config{{Guarantee: AtLeastOnce}, {Guarantee: AtMostOnce}} {
		moved, dead, fresh, ok := l.move(gen, tasks, cfg, gen.Parallelism, []string{"w2", "w3"}, true, now)
		if !ok || len(dead) != 1 || dead[0] != "w1" || moved.Moves["w1"].Incarnation != 1 || !slices.Equal(fresh, []string{"s[0]"}) {
			t.Fatalf("%v without checkpoints, the spout's worker died: move = %v, dead %v, without state %v, moves %+v", cfg.Guarantee, ok, dead, fresh, moved.Moves)
		}
	}
}

// TestLayoutOfMoves: a moved slot keeps its number; its incarnation and
// the time its owner died reach the runtime's generation.
func TestLayoutOfMoves(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	g := cluster.Generation{Number: 2, Assignment: map[int]string{0: "a", 1: "b", 2: "c"},
		Moves: map[string]cluster.Move{"b": {To: "c", Incarnation: 3, At: at}}}
	wg, err := layout(g)
	if err != nil {
		t.Fatal(err)
	}
	if wg.Slots != 3 || wg.Assign[1] != 1 || wg.incarnation(1) != 3 || wg.incarnation(0) != 0 || !wg.DiedAt[1].Equal(at) {
		t.Fatalf("layout = %+v", wg)
	}
	if FrameEpoch(2, 3)>>incarnationBits != 2 || FrameEpoch(2, 3) <= FrameEpoch(2, 0) || FrameEpoch(3, 0) <= FrameEpoch(2, 1<<incarnationBits-1) {
		t.Fatal("frame epochs do not order by generation, then incarnation")
	}
}

// TestGenerationBeforeItsSubmissionWaits: a generation that reaches a
// worker before the submission it runs (the two are watched apart) is
// kept, not dropped, so that the worker joins it when the submission
// comes; dropping it held the generation's start barrier for good.
func TestGenerationBeforeItsSubmissionWaits(t *testing.T) {
	r := &runner{members: map[int]*Member{}, gen: 14}
	r.spec = cluster.Spec{Name: "wc", State: cluster.StateFinished}
	g := cluster.Generation{Topology: "wc", Number: 15, Created: time.Now()}
	r.onGeneration(context.Background(), g)
	if r.waiting == nil || r.waiting.Number != 15 || r.gen != 14 {
		t.Fatalf("after generation 15 of a finished topology: waiting %v, generation %d", r.waiting, r.gen)
	}
	r.onGeneration(context.Background(), cluster.Generation{Topology: "wc", Number: 13})
	if r.waiting.Number != 15 {
		t.Fatalf("an older generation replaced the waiting one: %v", r.waiting)
	}
}

// TestLeaderMovesASlotBackToItsWorker: a worker that comes back gets the
// slot that moved away from it, within the generation, unless a worker
// without such a slot joins with it (that one needs the handover).
func TestLeaderMovesASlotBackToItsWorker(t *testing.T) {
	now := time.Now()
	gen := cluster.Generation{Topology: "t", Number: 4, Assignment: map[int]string{0: "w1", 1: "w2", 2: "w3"},
		Moves: map[string]cluster.Move{"w2": {To: "w3", Incarnation: 1}}}
	l := &leading{lg: &Leader{g: Generation{Number: 4}, began: now}}
	back, ok := l.moveBack(gen, []string{"w2"}, now)
	if !ok || back.Moves["w2"] != (cluster.Move{To: "w2", Incarnation: 2, At: now}) || gen.Moves["w2"].To != "w3" {
		t.Fatalf("w2 came back: %v, moves %+v (given %+v)", ok, back.Moves, gen.Moves)
	}
	for what, c := range map[string]struct {
		l      *leading
		joined []string
	}{
		"a new worker with it":   {l, []string{"w2", "w4"}},
		"a new worker":           {l, []string{"w4"}},
		"a generation not begun": {&leading{lg: &Leader{g: Generation{Number: 4}}}, []string{"w2"}},
		"no lead":                {&leading{}, []string{"w2"}},
	} {
		if _, ok := c.l.moveBack(gen, c.joined, now); ok {
			t.Errorf("%s: the leader moved a slot back", what)
		}
	}
}

// TestRestartBackoff: restarts for failed tasks wait 0.5 s, then twice as
// long each time, never more than 30 s, however many came before.
func TestRestartBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second} {
		if got := restartBackoff(n); got != want {
			t.Errorf("restart %d waits %v, want %v", n, got, want)
		}
	}
}

// TestAGenerationWhoseCheckpointWasReplaced: a worker that came back to a
// generation which ran on without it finds the checkpoint the generation
// started from deleted by retention, newer ones in its place. That is no
// failure of the topology's tasks (it once failed a local run under crash
// chaos, whose FailAfter is 1); a checkpoint missing with nothing newer,
// or another error, still is.
func TestAGenerationWhoseCheckpointWasReplaced(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.NewMemory()
	for epoch := uint64(1); epoch <= 6; epoch++ {
		e, err := checkpoint.WriteTask(ctx, store, "t", epoch, 0, "count", 0, []byte("state"))
		if err != nil {
			t.Fatal(err)
		}
		// Keeping 3: epochs 1-3 are gone once 6 is committed.
		if err := checkpoint.Commit(ctx, store, checkpoint.Manifest{Topology: "t", Fingerprint: "f", Epoch: epoch, Tasks: []checkpoint.TaskEntry{e}}, 3); err != nil {
			t.Fatal(err)
		}
	}
	r := &runner{name: "t", store: store}
	gone := func(epoch uint64) error {
		_, err := checkpoint.Load(ctx, store, "t", epoch, "f")
		if err == nil {
			t.Fatalf("epoch %d loads; the test's retention did not delete it", epoch)
		}
		return fmt.Errorf("workers: generation 6 cannot restore checkpoint %d: %w", epoch, err)
	}
	for _, c := range []struct {
		restore uint64
		err     error
		want    bool
	}{
		{3, gone(3), true},  // replaced by 4-6
		{9, gone(9), false}, // missing, nothing newer
		{0, gone(3), false}, // the generation restores nothing
		{3, errors.New("the bolt cannot prepare"), false},
	} {
		if got := r.replaced(ctx, cluster.Generation{Number: 6, RestoreFrom: c.restore}, c.err); got != c.want {
			t.Errorf("restore %d, %v: replaced = %v, want %v", c.restore, c.err, got, c.want)
		}
	}

	// The leader counts a failure unless every failed owner found its
	// checkpoint replaced.
	owners := []string{"a", "b"}
	for _, c := range []struct {
		reports    []Report
		failed     int
		superseded bool
	}{
		{nil, 0, false},
		{[]Report{{Member: "a", Failed: 6, Superseded: true}}, 1, true},
		{[]Report{{Member: "a", Failed: 6, Superseded: true}, {Member: "b", Failed: 6}}, 2, false},
		{[]Report{{Member: "a", Failed: 5, Superseded: true}, {Member: "c", Failed: 6, Superseded: true}}, 0, false}, // another generation; not an owner
	} {
		failed, superseded := failedIn(c.reports, 6, owners)
		if len(failed) != c.failed || superseded != c.superseded {
			t.Errorf("reports %+v: failed %v, superseded %v; want %d failed, superseded %v", c.reports, failed, superseded, c.failed, c.superseded)
		}
	}
}

// TestQuietKeySaysWhatTheLeaderDecidesFrom: a report whose only news is
// its counters may wait (NodeConfig.quietEvery); one that says the sources
// are done, the records drained, a task failed, or another generation, may
// not.
func TestQuietKeySaysWhatTheLeaderDecidesFrom(t *testing.T) {
	base := func() Report {
		return Report{Member: "w1", Generation: 4, Updated: time.Unix(100, 0), Status: &MemberStatus{
			Generation: 4, Begun: true, Records: 1000, Unprocessed: 37,
			Tasks: []TaskStatus{{Task: 0, Component: "lines", Spout: true, Pending: 12}, {Task: 1, Component: "split", Queue: 3, Capacity: 0.5}},
		}}
	}
	same := map[string]func(*Report){
		"later":                 func(r *Report) { r.Updated = r.Updated.Add(time.Second) },
		"more records":          func(r *Report) { r.Status.Records = 5000 },
		"fewer in flight":       func(r *Report) { r.Status.Unprocessed = 5 },
		"other pending":         func(r *Report) { r.Status.Tasks[0].Pending = 4000 },
		"queue and load":        func(r *Report) { r.Status.Tasks[1].Queue, r.Status.Tasks[1].Capacity = 60, 1 },
		"exhausted but pending": func(r *Report) { r.Status.Tasks[0].Exhausted = true },
	}
	news := map[string]func(*Report){
		"sources done":    func(r *Report) { r.Status.Tasks[0].Exhausted, r.Status.Tasks[0].Pending = true, 0 },
		"failed":          func(r *Report) { r.Failed, r.Error = 4, "split: boom" },
		"superseded":      func(r *Report) { r.Failed, r.Superseded = 4, true },
		"next generation": func(r *Report) { r.Generation, r.Status.Generation = 5, 5 },
		"not begun":       func(r *Report) { r.Status.Begun = false },
		"a slot moved in": func(r *Report) { r.Status.Tasks = append(r.Status.Tasks, TaskStatus{Task: 2}) },
		"leads":           func(r *Report) { r.Leader, r.Checkpoint = true, 3 },
		"new checkpoint":  func(r *Report) { r.Checkpoint = 3 },
		"restored":        func(r *Report) { r.RestoredFrom = 2 },
		"no status":       func(r *Report) { r.Status = nil },
	}
	want := base().quietKey(false)
	for name, edit := range same {
		rep := base()
		edit(&rep)
		if rep.quietKey(false) != want {
			t.Errorf("%s: the key changed, so the report would go out every round", name)
		}
	}
	for name, edit := range news {
		rep := base()
		edit(&rep)
		if rep.quietKey(false) == want {
			t.Errorf("%s: the key did not change, so the leader could hear of it %v late", name, inClusterQuiet)
		}
	}
	// Once the records stop moving, the count in flight is news: the
	// leader adds the members' counts up to see that none is left.
	idle := base().quietKey(true)
	if idle == want {
		t.Error("a member going idle does not report it")
	}
	for _, n := range []int64{0, 5, -37} {
		rep := base()
		rep.Status.Unprocessed = n
		if rep.quietKey(true) == idle {
			t.Errorf("idle with %d in flight instead of 37: the key did not change", n)
		}
	}
	// With the sources done, a report of none in flight must not stand
	// once records are counted again, while they still move (not idle):
	// three rounds of a stale 0 end a run without checkpoints.
	done := func(unprocessed int64) Report {
		rep := base()
		rep.Status.Tasks[0].Exhausted, rep.Status.Tasks[0].Pending, rep.Status.Unprocessed = true, 0, unprocessed
		return rep
	}
	if done(0).quietKey(false) == done(12).quietKey(false) {
		t.Error("sources done: 0 in flight and then 12, not idle: the key did not change, so the 0 could stand")
	}
	if done(12).quietKey(false) != done(40).quietKey(false) {
		t.Error("sources done: 12 in flight and then 40, not idle: the key changed, so the report would go out every round")
	}
}
