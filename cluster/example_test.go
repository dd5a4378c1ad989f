package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ackflow/ackflow/cluster"
)

// A leader spreads a topology's tasks over the live workers and writes them
// as the next generation; a second leader working from the same revision
// loses, and reads again.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	members, err := cluster.NewMemoryMembers(cluster.DefaultMembersConfig())
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		if err := members.Join(ctx, cluster.Member{Name: name}); err != nil {
			panic(err)
		}
	}
	live, err := members.List(ctx)
	if err != nil {
		panic(err)
	}
	var names []string
	for _, m := range live {
		names = append(names, m.Name)
	}

	gens := cluster.NewMemoryGenerations()
	g := cluster.Generation{
		Topology:    "wordcount",
		Number:      1,
		Parallelism: map[string]int{"lines": 1, "split": 2, "count": 3},
		Assignment:  cluster.Assign("wordcount", []int{0, 1, 2, 3, 4, 5}, names),
		Leader:      "w1",
		Reason:      "submitted",
	}
	if _, err := gens.Next(ctx, g, 0); err != nil {
		panic(err)
	}
	_, err = gens.Next(ctx, g, 0)
	fmt.Println("second writer conflicts:", errors.Is(err, cluster.ErrConflict))

	current, rev, err := gens.Current(ctx, "wordcount")
	if err != nil {
		panic(err)
	}
	fmt.Println("generation", current.Number, "at a revision:", rev > 0)
	for _, task := range slices.Sorted(maps.Keys(current.Assignment)) {
		fmt.Printf("task %d -> %s\n", task, current.Assignment[task])
	}
	// Output:
	// second writer conflicts: true
	// generation 1 at a revision: true
	// task 0 -> w2
	// task 1 -> w1
	// task 2 -> w3
	// task 3 -> w3
	// task 4 -> w2
	// task 5 -> w3
}

// When a worker leaves, only its tasks move.
func ExampleAssign() {
	tasks := []int{0, 1, 2, 3, 4, 5, 6, 7}
	before := cluster.Assign("wordcount", tasks, []string{"w1", "w2", "w3"})
	after := cluster.Assign("wordcount", tasks, []string{"w1", "w3"})
	for _, task := range tasks {
		fmt.Printf("task %d: %s -> %s\n", task, before[task], after[task])
	}
	// Output:
	// task 0: w2 -> w3
	// task 1: w1 -> w1
	// task 2: w3 -> w3
	// task 3: w3 -> w3
	// task 4: w2 -> w3
	// task 5: w3 -> w3
	// task 6: w1 -> w1
	// task 7: w1 -> w1
}
