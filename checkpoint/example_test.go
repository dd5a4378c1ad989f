package checkpoint_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
)

// A checkpoint is a blob per task, then the manifest; a restart restores
// the latest epoch that is complete and verifies.
func Example() {
	ctx := context.Background()
	s := checkpoint.NewMemory()
	for epoch := uint64(1); epoch <= 2; epoch++ {
		m := checkpoint.Manifest{Topology: "wordcount", Fingerprint: "f00d", Epoch: epoch, Started: time.Now()}
		for task, state := range []string{"offset 100", "the=3 cat=1"} {
			e, err := checkpoint.WriteTask(ctx, s, "wordcount", epoch, task, "count", task, fmt.Appendf(nil, "%s at %d", state, epoch))
			if err != nil {
				panic(err)
			}
			m.Tasks = append(m.Tasks, e)
		}
		if err := checkpoint.Commit(ctx, s, m, 2); err != nil {
			panic(err)
		}
	}
	// A crash during epoch 3: one blob written, no manifest.
	if _, err := checkpoint.WriteTask(ctx, s, "wordcount", 3, 0, "count", 0, []byte("offset 300")); err != nil {
		panic(err)
	}

	r, err := checkpoint.Latest(ctx, s, "wordcount", "f00d")
	if err != nil {
		panic(err)
	}
	fmt.Println("restoring epoch", r.Manifest.Epoch)
	fmt.Printf("task 1: %s\n", r.Blobs[1])
	fmt.Println("skipped:", r.Skipped[0])
	// Output:
	// restoring epoch 2
	// task 1: the=3 cat=1 at 2
	// skipped: checkpoint: epoch 3 of wordcount is incomplete: it has no manifest, because its checkpoint did not finish; it cannot be restored
}
