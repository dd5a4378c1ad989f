package cluster_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
)

// TestKVPositionGarbageIsInvalid: an entry of the positions bucket that
// no ackflow program wrote is refused as invalid, with its revision, so
// that a spout task can write over it (the conformance suite,
// clustertest.RunPositions, covers the rest in memory and in KV alike).
func TestKVPositionGarbageIsInvalid(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	kv, err := cluster.NewKVPositions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := js.KeyValue(ctx, cluster.PositionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i, garbage := range []string{"not a position", `{"topology":"other","task":7,"submitted":"2026-01-01T00:00:00Z"}`} {
		rev, err := raw.Put(ctx, "wc.7", []byte(garbage))
		if err != nil {
			t.Fatal(err)
		}
		if _, got, err := kv.Get(ctx, "wc", 7); !errors.Is(err, cluster.ErrInvalidEntry) || got != rev {
			t.Fatalf("garbage %d: revision %d, %v; want ErrInvalidEntry at %d", i, got, err, rev)
		}
	}
}
