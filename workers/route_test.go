package workers

import (
	"math"
	"testing"

	"github.com/ackflow/ackflow/topology"
)

// TestShuffleByIDIsEven: shuffle picks the task from the record ID, so the
// spread must be as even as a random choice for the IDs the runtime makes,
// roots of consecutive offsets and the children of one input alike.
func TestShuffleByIDIsEven(t *testing.T) {
	const records = 120000
	for _, n := range []int{2, 3, 5, 7, 16} {
		so := &streamOut{routes: []route{{grouping: topology.GroupShuffle, tasks: make([]int, n)}}}
		for i := range so.routes[0].tasks {
			so.routes[0].tasks[i] = i
		}
		roots, children := make([]int, n), make([]int, n)
		parent := topology.RootID("lines", topology.DefaultStream, topology.MsgID{Offset: 7})
		key := topology.TaskKey(topology.StreamKey("split", topology.DefaultStream), 1)
		var dst []int
		for i := 0; i < records; i++ {
			dst = targets(dst[:0], so, topology.RootID("lines", topology.DefaultStream, topology.MsgID{Offset: int64(i)}), nil, 0)
			roots[dst[0]]++
			dst = targets(dst[:0], so, topology.ChildID(parent, key, i), nil, 0)
			children[dst[0]]++
		}
		for what, counts := range map[string][]int{"roots": roots, "children": children} {
			// A random choice would be within 5 standard deviations of the
			// mean with overwhelming probability.
			mean := float64(records) / float64(n)
			sd := math.Sqrt(mean * (1 - 1/float64(n)))
			for task, c := range counts {
				if math.Abs(float64(c)-mean) > 5*sd {
					t.Errorf("%d tasks, %s: task %d got %d records, mean %.0f", n, what, task, c, mean)
				}
			}
		}
	}
}

// TestShuffleIsDeterministic: the same record goes to the same task,
// however often it is sent, which is what lets a replay meet the filter
// that saw the original.
func TestShuffleIsDeterministic(t *testing.T) {
	so := &streamOut{routes: []route{
		{grouping: topology.GroupShuffle, tasks: []int{4, 5, 6}},
		{grouping: topology.GroupLocalOrShuffle, tasks: []int{7, 8, 9}, byWorker: map[int][]int{0: {7}, 1: {8, 9}}},
	}}
	for id := uint64(1); id < 1000; id++ {
		a := targets(nil, so, id*0x9e3779b97f4a7c15, nil, 1)
		b := targets(nil, so, id*0x9e3779b97f4a7c15, nil, 1)
		if len(a) != 2 || a[0] != b[0] || a[1] != b[1] || (a[1] != 8 && a[1] != 9) {
			t.Fatalf("record %d: %v then %v", id, a, b)
		}
	}
}

// BenchmarkTargets is the routing of one record: a shuffle by ID and a
// Fields grouping on a string (hash, key group, task), as word count's
// split and count subscriptions route.
func BenchmarkTargets(b *testing.B) {
	schema := topology.NewSchema("word")
	so := &streamOut{routes: []route{
		{grouping: topology.GroupShuffle, tasks: []int{1, 2}},
		{grouping: topology.GroupFields, fieldIdx: []int{0}, keyGroups: topology.DefaultKeyGroups, tasks: []int{3, 4}, schema: schema},
	}}
	values := topology.Values{"lowercased"}
	var dst []int
	id := uint64(1)
	for b.Loop() {
		id *= 0x9e3779b97f4a7c15
		dst = targets(dst[:0], so, id, values, 0)
	}
}
