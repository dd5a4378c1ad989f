package workers

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTreeForPicksALocalAcker: a spout's tree IDs go to the ackers of its
// own worker, spread over all of them, never 0, and stay random apart from
// their residue; with no local acker (or all of them local) any ID does.
func TestTreeForPicksALocalAcker(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		ackers int
		local  []int
	}{{1, nil}, {2, []int{0}}, {2, []int{1}}, {3, []int{0, 2}}, {5, []int{1, 3, 4}}, {7, []int{6}}, {4, nil}} {
		seen := map[uint64]int{}
		ids := map[uint64]bool{}
		const draws = 30000
		for range draws {
			raw := r.Uint64() | 1
			tree := treeFor(raw, tc.ackers, tc.local)
			if tree == 0 {
				t.Fatalf("ackers %d, local %v: tree ID 0", tc.ackers, tc.local)
			}
			if tc.local == nil && tree != raw {
				t.Fatalf("ackers %d, no local acker: tree %d, want the random %d itself", tc.ackers, tree, raw)
			}
			idx := tree % uint64(tc.ackers)
			if tc.local != nil && !slices.Contains(tc.local, int(idx)) {
				t.Fatalf("ackers %d, local %v: tree %d goes to acker %d", tc.ackers, tc.local, tree, idx)
			}
			seen[idx]++
			ids[tree] = true
		}
		if tc.local != nil {
			for _, l := range tc.local {
				// Each local acker gets its share, within a tenth of it.
				share := draws / len(tc.local)
				if n := seen[uint64(l)]; n < share*9/10 || n > share*11/10 {
					t.Errorf("ackers %d, local %v: acker %d got %d of %d trees, want about %d", tc.ackers, tc.local, l, n, draws, share)
				}
			}
		}
		if len(ids) < draws-1 {
			t.Errorf("ackers %d, local %v: %d distinct tree IDs in %d draws", tc.ackers, tc.local, len(ids), draws)
		}
	}
	// The smallest random numbers still give a non-zero ID of a local acker.
	for raw := uint64(1); raw < 20; raw++ {
		if tree := treeFor(raw, 3, []int{0}); tree == 0 || tree%3 != 0 {
			t.Fatalf("treeFor(%d, 3, [0]) = %d", raw, tree)
		}
	}
}

// TestAckersGoBesideTheirSpouts: acker i goes to the worker of spout task
// i mod the spouts, whatever the placement gave it, and nothing else moves.
func TestAckersGoBesideTheirSpouts(t *testing.T) {
	tasks := []TaskRef{
		{ID: 0, Component: "a", Spout: true, Stateful: true},
		{ID: 1, Component: "b", Spout: true, Stateful: true},
		{ID: 2, Component: "mid"},
		{ID: 3, Component: "mid", Index: 1},
		{ID: 4, Component: ackerComponent},
		{ID: 5, Component: ackerComponent, Index: 1},
		{ID: 6, Component: ackerComponent, Index: 2},
	}
	assign := map[int]string{0: "w1", 1: "w3", 2: "w2", 3: "w1", 4: "w2", 5: "w2", 6: "w2"}
	got := withSpouts(tasks, assign)
	want := map[int]string{0: "w1", 1: "w3", 2: "w2", 3: "w1", 4: "w1", 5: "w3", 6: "w1"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("task %d on %s, want %s (%v)", id, got[id], w, got)
		}
	}
	// Without spouts (never in a valid topology) the placement is kept.
	noSpouts := []TaskRef{{ID: 0, Component: "mid"}, {ID: 1, Component: ackerComponent}}
	if got := withSpouts(noSpouts, map[int]string{0: "w1", 1: "w2"}); got[1] != "w2" {
		t.Errorf("an acker moved with no spout to follow: %v", got)
	}
}
