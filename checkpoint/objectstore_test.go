package checkpoint_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/checkpoint"
)

func TestBucketName(t *testing.T) {
	got, err := checkpoint.BucketName("word-count_2")
	if err != nil || got != "ackflow_ckpt_word-count_2" {
		t.Fatalf("BucketName = %q, %v", got, err)
	}
	for _, topology := range []string{"", "a.b", "a/b", "a b", "a*", "a>", "ä"} {
		if name, err := checkpoint.BucketName(topology); err == nil {
			t.Errorf("BucketName(%q) = %q, want a refusal", topology, name)
		}
	}
}

func TestNewObjectStoreRefusesABadBucketName(t *testing.T) {
	// No server: the name is refused before any request.
	_, err := checkpoint.NewObjectStore(context.Background(), nil, "a.b")
	if err == nil || !strings.Contains(err.Error(), "cannot name a JetStream object store bucket") {
		t.Fatalf("got %v, want a refusal", err)
	}
}

func TestObjectStoreCreatesAndReusesItsBucket(t *testing.T) {
	defer goleak.VerifyNone(t)
	js, stop := startJetStream(t)
	defer stop()
	ctx := context.Background()
	bucket, err := checkpoint.BucketName("wordcount")
	if err != nil {
		t.Fatal(err)
	}
	s, err := checkpoint.NewObjectStore(ctx, js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if s.Bucket() != "ackflow_ckpt_wordcount" {
		t.Fatalf("Bucket = %q", s.Bucket())
	}
	if names := list(t, s, ""); len(names) != 0 {
		t.Fatalf("a new bucket lists %q", names)
	}
	put(t, s, "wordcount/x", "kept")
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	status, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Storage() != jetstream.FileStorage {
		t.Fatalf("bucket storage %v, want file", status.Storage())
	}
	// A second worker, or the next run, binds to the same bucket.
	again, err := checkpoint.NewObjectStore(ctx, js, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, again, "wordcount/x"); got != "kept" {
		t.Fatalf("the reopened bucket holds %q", got)
	}
}
