package workers

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/ackflow/ackflow/topology"
)

// targets appends to dst the tasks that one non-direct emit of the record id
// on so goes to. Shuffle and local-or-shuffle pick the task from the record
// ID, not from a random number (DESIGN.md section 3): a replay then reaches
// the task that saw the original, whose dedup filter knows it. Record IDs
// are uniformly distributed hashes, so the spread is even.
func targets(dst []int, so *streamOut, id uint64, values topology.Values, slot int) []int {
	for i := range so.routes {
		r := &so.routes[i]
		switch r.grouping {
		case topology.GroupShuffle:
			dst = append(dst, r.tasks[pick(id, len(r.tasks))])
		case topology.GroupLocalOrShuffle:
			if local := r.byWorker[slot]; len(local) > 0 {
				dst = append(dst, local[pick(id, len(local))])
			} else {
				dst = append(dst, r.tasks[pick(id, len(r.tasks))])
			}
		case topology.GroupFields:
			// Keys hash into key groups, key groups map to tasks by
			// ranges: the same mapping keyed state is kept by.
			h := topology.HashSeed
			for _, idx := range r.fieldIdx {
				h = topology.HashValue(h, values[idx])
			}
			g := topology.KeyGroup(h, r.keyGroups)
			dst = append(dst, r.tasks[topology.KeyGroupOwner(g, r.keyGroups, len(r.tasks))])
		case topology.GroupAll:
			dst = append(dst, r.tasks...)
		case topology.GroupGlobal:
			dst = append(dst, r.tasks[0])
		}
	}
	return dst
}

// pick maps a uniformly distributed id to 0..n-1 (Lemire's multiply-shift,
// which uses the high bits, unlike id % n).
func pick(id uint64, n int) int {
	hi, _ := bits.Mul64(id, uint64(n))
	return int(hi)
}

// directTargets appends the task named by an EmitDirect, after checking
// that it subscribes to so. Every subscriber of a direct stream uses the
// Direct grouping (the builder checks), so the task is a member of one of
// the routes.
func directTargets(dst []int, so *streamOut, task int) ([]int, error) {
	for i := range so.routes {
		if slices.Contains(so.routes[i].tasks, task) {
			return append(dst, task), nil
		}
	}
	return dst, fmt.Errorf("task %d does not subscribe to stream %q (its subscribers' tasks are %v); take task IDs from TaskContext.TasksOf", task, so.name, directTasks(so))
}

func directTasks(so *streamOut) []int {
	var ts []int
	for _, r := range so.routes {
		ts = append(ts, r.tasks...)
	}
	return ts
}

// memSize estimates the bytes a record with wire size wire and n values
// occupies in memory, for the byte bounds on spout pending records and
// output logs: the encoded bytes plus the interface and slice headers.
func memSize(wire, n int) int { return wire + 24 + 16*n }

// recordOverhead bounds a record's envelope in a frame beyond its values
// (ID, epoch, task, stream name, counts); anchors add anchorBytes each.
const (
	recordOverhead = 64
	anchorBytes    = 16
)
