package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
)

// TestPositionsAreWrittenByCompareAndSet: a spout task's position is
// absent until written, is read back with its revision, and a writer
// whose revision is stale (another owner wrote since) gets ErrConflict;
// an entry that is not a position is refused as invalid, with its
// revision. In memory and in JetStream KV alike.
func TestPositionsAreWrittenByCompareAndSet(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	kv, err := cluster.NewKVPositions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for name, ps := range map[string]cluster.Positions{"memory": cluster.NewMemoryPositions(), "kv": kv} {
		t.Run(name, func(t *testing.T) {
			if _, rev, err := ps.Get(ctx, "wc", 0); !errors.Is(err, cluster.ErrNotFound) || rev != 0 {
				t.Fatalf("a position never written: revision %d, %v; want ErrNotFound", rev, err)
			}
			p := cluster.SpoutPosition{Topology: "wc", Task: 0, Submitted: time.Unix(1e9, 0).UTC(), Position: []byte("at 10")}
			first, err := ps.Put(ctx, p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ps.Put(ctx, p, 0); !errors.Is(err, cluster.ErrConflict) {
				t.Fatalf("creating a position that exists: %v, want ErrConflict", err)
			}
			p.Position = []byte("at 20")
			second, err := ps.Put(ctx, p, first)
			if err != nil {
				t.Fatal(err)
			}
			got, rev, err := ps.Get(ctx, "wc", 0)
			if err != nil || rev != second || string(got.Position) != "at 20" || !got.Submitted.Equal(p.Submitted) {
				t.Fatalf("read back %+v at revision %d (%v), want %q at %d", got, rev, err, "at 20", second)
			}
			p.Position = []byte("at 15")
			if _, err := ps.Put(ctx, p, first); !errors.Is(err, cluster.ErrConflict) {
				t.Fatalf("a write from a stale revision: %v, want ErrConflict", err)
			}
			if _, _, err := ps.Get(ctx, "wc", 1); !errors.Is(err, cluster.ErrNotFound) {
				t.Fatalf("task 1 has a position: %v", err)
			}
			if _, err := ps.Put(ctx, cluster.SpoutPosition{Topology: "a.b", Submitted: p.Submitted}, 0); err == nil {
				t.Fatal("a position of a topology named a.b was written")
			}
		})
	}
	// Garbage under a task's key is refused as invalid, with its revision.
	raw, err := js.KeyValue(ctx, cluster.PositionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := raw.Put(ctx, "wc.7", []byte("not a position"))
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := kv.Get(ctx, "wc", 7); !errors.Is(err, cluster.ErrInvalidEntry) || got != rev {
		t.Fatalf("garbage: revision %d, %v; want ErrInvalidEntry at %d", got, err, rev)
	}
}
