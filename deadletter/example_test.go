package deadletter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ackflow/ackflow/deadletter"
)

// A run writes what it gave up on to a file; a person reads it back later
// to look at it or to re-inject the records.
func ExampleFile() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	sink := deadletter.NewFile(filepath.Join(dir, "dead.jsonl"))
	err := sink.Put(context.Background(), deadletter.Letter{
		Topology: "wordcount", Spout: "lines", Stream: "default", Offset: 17,
		RecordID: 0x9e3779b97f4a7c15, Attempts: 5,
		Error: "count: redis: connection refused", Component: "count", Task: 2,
		Values: []any{"the cat sat", int64(3)},
		Time:   time.Now(),
	})
	if err != nil {
		fmt.Println(err)
	}
	sink.Close()

	letters, err := deadletter.ReadFile(sink.Path())
	if err != nil {
		fmt.Println(err)
	}
	for _, l := range letters {
		fmt.Printf("%s offset %d after %d attempts: %s %#v\n", l.Spout, l.Offset, l.Attempts, l.Error, l.Values)
	}
	// Output: lines offset 17 after 5 attempts: count: redis: connection refused []interface {}{"the cat sat", 3}
}
