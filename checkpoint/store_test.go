package checkpoint_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/checkpoint"
	"github.com/ackflow/ackflow/checkpoint/storetest"
	"github.com/ackflow/ackflow/embednats/natstest"
)

func TestMemoryConforms(t *testing.T) {
	storetest.Run(t, func(t *testing.T) checkpoint.Store { return checkpoint.NewMemory() })
}

func TestDirConforms(t *testing.T) {
	storetest.Run(t, func(t *testing.T) checkpoint.Store { return newDir(t) })
}

func TestObjectStoreConforms(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) checkpoint.Store {
		bucket := fmt.Sprintf("conformance_%d", n.Add(1)) // a bucket per case
		s, err := checkpoint.NewObjectStore(context.Background(), js, bucket)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestObjectStoreOverwriteLeavesNoChunks checks that Put, which writes the
// object store's layout itself, removes the chunks of the object it
// replaces and writes objects that nats.go reads with their metadata.
func TestObjectStoreOverwriteLeavesNoChunks(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	s, err := checkpoint.NewObjectStore(ctx, js, "overwrite")
	if err != nil {
		t.Fatal(err)
	}
	big := storetest.Bytes(7, 300_000) // three chunks
	if err := s.Put(ctx, "x", big); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, "overwrite")
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != uint64(len(big)) || info.Chunks != 3 {
		t.Fatalf("nats.go reads size %d in %d chunks, want %d in 3", info.Size, info.Chunks, len(big))
	}
	if err := s.Put(ctx, "x", []byte("short")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "OBJ_overwrite")
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Msgs != 2 {
		t.Fatalf("after an overwrite the bucket's stream holds %d messages, want 2 (one chunk and the metadata)", si.State.Msgs)
	}
}

func newDir(t *testing.T) *checkpoint.Dir {
	t.Helper()
	d, err := checkpoint.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startJetStream starts an embedded server with JetStream; stop closes it.
func startJetStream(t *testing.T) (jetstream.JetStream, func()) { return natstest.JetStream(t) }
