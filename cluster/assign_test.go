package cluster_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/ackflow/ackflow/cluster"
)

func tasks(n int) []int {
	ts := make([]int, n)
	for i := range ts {
		ts[i] = i
	}
	return ts
}

func TestAssignGivesEveryTaskToALiveMember(t *testing.T) {
	for _, c := range []struct {
		tasks   []int
		members []string
	}{
		{tasks(60), []string{"w1", "w2", "w3"}},
		{tasks(1), []string{"w1"}},
		{[]int{5, 17, 1000}, []string{"b", "a"}},
		{nil, []string{"w1"}},
	} {
		got := cluster.Assign("wordcount", c.tasks, c.members)
		if len(got) != len(c.tasks) {
			t.Errorf("Assign(%v, %v) assigned %d tasks", c.tasks, c.members, len(got))
		}
		for _, task := range c.tasks {
			if !slices.Contains(c.members, got[task]) {
				t.Errorf("task %d went to %q, not one of %v", task, got[task], c.members)
			}
		}
	}
}

func TestAssignWithoutMembersIsEmpty(t *testing.T) {
	for _, members := range [][]string{nil, {}} {
		if got := cluster.Assign("wordcount", tasks(10), members); got == nil || len(got) != 0 {
			t.Errorf("Assign with members %v = %v, want an empty map", members, got)
		}
	}
}

func TestAssignIsDeterministicAndOrderFree(t *testing.T) {
	a := cluster.Assign("wordcount", tasks(100), []string{"w1", "w2", "w3", "w4"})
	b := cluster.Assign("wordcount", tasks(100), []string{"w4", "w2", "w1", "w3"})
	if !maps.Equal(a, b) {
		t.Fatalf("the order of members changed the assignment")
	}
	// Another topology spreads its tasks differently, so that task 0 of
	// every topology does not land on one worker.
	other := cluster.Assign("pageviews", tasks(100), []string{"w1", "w2", "w3", "w4"})
	if maps.Equal(a, other) {
		t.Fatalf("two topologies have the same assignment")
	}
}

// TestAssignBalance asserts that each of 3 members gets between 10 and 30
// of 60 tasks, half to one and a half times its fair share of 20. Why that
// holds: with a well-mixed hash each task goes to each member with
// probability 1/3, independently, so a member's count is Binomial(60, 1/3):
// mean 20, standard deviation 3.65, and 10 and 30 are 2.7 standard
// deviations away, a chance of about 0.4% each way for one member of one
// topology. The assignment is deterministic, so for the fixed names here
// the test cannot flake; the spread over a thousand topologies is checked
// against the binomial too, which is what would catch a skewed hash.
func TestAssignBalance(t *testing.T) {
	members := []string{"w1", "w2", "w3"}
	for _, topology := range []string{"wordcount", "pageviews", "a", "topology-with-a-long-name_2"} {
		counts := countPerMember(cluster.Assign(topology, tasks(60), members))
		for _, m := range members {
			if counts[m] < 10 || counts[m] > 30 {
				t.Errorf("%s: %s got %d of 60 tasks, want 10 to 30 (counts %v)", topology, m, counts[m], counts)
			}
		}
	}
	var sum, sumSq float64
	n := 0
	for i := range 1000 {
		counts := countPerMember(cluster.Assign(fmt.Sprintf("t%d", i), tasks(60), members))
		for _, m := range members {
			c := float64(counts[m])
			sum, sumSq, n = sum+c, sumSq+c*c, n+1
		}
	}
	mean := sum / float64(n)
	sd := math.Sqrt(sumSq/float64(n) - mean*mean)
	t.Logf("over 1000 topologies: mean %.2f tasks per member, standard deviation %.2f (binomial: 20, 3.65)", mean, sd)
	// 3000 counts estimate the deviation to within about 2%; a hash that
	// favoured one member would spread them far wider.
	if sd < 3.2 || sd > 4.1 {
		t.Fatalf("the standard deviation of tasks per member is %.2f, want about 3.65", sd)
	}
}

func countPerMember(assignment map[int]string) map[string]int {
	counts := map[string]int{}
	for _, m := range assignment {
		counts[m]++
	}
	return counts
}

func TestAssignMovesOnlyWhatItMust(t *testing.T) {
	ts := tasks(200)
	before := cluster.Assign("wordcount", ts, []string{"w1", "w2", "w3"})
	joined := cluster.Assign("wordcount", ts, []string{"w1", "w2", "w3", "w4"})
	moved := 0
	for _, task := range ts {
		if joined[task] != before[task] {
			moved++
			if joined[task] != "w4" {
				t.Errorf("when w4 joined, task %d moved from %s to %s, not to w4", task, before[task], joined[task])
			}
		}
	}
	if moved == 0 {
		t.Errorf("no task moved to the new member")
	}
	left := cluster.Assign("wordcount", ts, []string{"w1", "w3"})
	for _, task := range ts {
		if before[task] != "w2" && left[task] != before[task] {
			t.Errorf("when w2 left, task %d moved from %s to %s though its member stayed", task, before[task], left[task])
		}
	}
	t.Logf("w4 joining moved %d of %d tasks (a quarter is %d)", moved, len(ts), len(ts)/4)
}
