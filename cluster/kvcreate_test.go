package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// staleCreateKV fails Create with "wrong last sequence" (code 10164) the
// first fails times, as a replicated bucket does when nats.go read a
// lagging replica's revision of a deleted key, then succeeds; with exists
// set, it answers that the key exists.
type staleCreateKV struct {
	jetstream.KeyValue
	fails, calls int
	exists       bool
}

func (kv *staleCreateKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	kv.calls++
	switch {
	case kv.calls <= kv.fails:
		return 0, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	case kv.exists:
		return 0, jetstream.ErrKeyExists
	}
	return 7, nil
}

// TestCreateTriesAgainAfterAStaleRevision: a member's entry is created
// although the first tries failed on a stale revision, a live key is still
// errKeyExists, and a write that keeps failing ends with its error.
func TestCreateTriesAgainAfterAStaleRevision(t *testing.T) {
	ctx := context.Background()
	kv := &staleCreateKV{fails: 2}
	rev, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil)
	if err != nil || rev != 7 || kv.calls != 3 {
		t.Fatalf("create after two stale revisions: rev %d, err %v, %d calls; want 7, nil, 3", rev, err, kv.calls)
	}
	kv = &staleCreateKV{fails: 1, exists: true}
	if _, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil); !errors.Is(err, errKeyExists) {
		t.Fatalf("create of a live key after a stale revision: %v, want errKeyExists", err)
	}
	kv = &staleCreateKV{fails: 100}
	if _, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil); !wrongLastSequence(err) || kv.calls != createTries {
		t.Fatalf("create that keeps failing: %v after %d calls; want the wrong-last-sequence error after %d", err, kv.calls, createTries)
	}
}
