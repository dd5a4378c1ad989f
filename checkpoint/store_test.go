package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
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

// TestObjectStoreGetChecksTheChunks reads, chunk by chunk, an object that
// nats.go wrote, and refuses one whose chunks were tampered with: the
// bytes must match the digest stored with the object.
func TestObjectStoreGetChecksTheChunks(t *testing.T) {
	// nats.go's own Put (used here to write an object as nats.go does)
	// starts a goroutine that reads its publisher's status channel and
	// removes that channel when the Put returns; when the goroutine is
	// scheduled only after that, it waits on a nil channel for good
	// (nats.go v1.55.0, jetstream/publish.go resetPendingAcksOnReconnect).
	// ackflow's store never calls nats.go's Put.
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction(
		"github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	s, err := checkpoint.NewObjectStore(ctx, js, "chunks")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, "chunks")
	if err != nil {
		t.Fatal(err)
	}
	big := storetest.Bytes(9, 300_000) // three chunks
	info, err := obs.PutBytes(ctx, "x", big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "x")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get of nats.go's object: %d bytes, %v; want the %d put", len(got), err, len(big))
	}
	if got, err := s.Get(ctx, "empty"); err != nil || len(got) != 0 {
		t.Fatalf("Get of an empty object: %q, %v", got, err)
	}
	// Replace the first chunk by one of the same length at the end of
	// the stream: the chunks still add up to the size, not to the digest.
	st, err := js.Stream(ctx, "OBJ_chunks")
	if err != nil {
		t.Fatal(err)
	}
	subject := "$O.chunks.C." + info.NUID
	first, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, first.Sequence); err != nil {
		t.Fatal(err)
	}
	forged := bytes.Clone(first.Data)
	forged[0] ^= 1
	if _, err := js.Publish(ctx, subject, forged); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "x"); err == nil || !strings.Contains(err.Error(), "does not match the digest") {
		t.Fatalf("Get of a tampered object: %v, want a digest mismatch", err)
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
