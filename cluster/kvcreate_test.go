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
// set, it answers that the key exists, and Get finds it. The first
// vanished calls say the key exists although Get finds nothing, as
// Create does when the key's expiry marker ends between its write and its
// read.
type staleCreateKV struct {
	jetstream.KeyValue
	fails, vanished, calls int
	exists                 bool
	getErr                 error
}

func (kv *staleCreateKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	kv.calls++
	switch {
	case kv.calls <= kv.fails:
		return 0, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	case kv.exists || kv.calls <= kv.fails+kv.vanished:
		return 0, jetstream.ErrKeyExists
	}
	return 7, nil
}

func (kv *staleCreateKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	switch {
	case kv.getErr != nil:
		return nil, kv.getErr
	case kv.exists:
		return liveEntry{key: key}, nil
	}
	return nil, jetstream.ErrKeyNotFound
}

// liveEntry is a key's entry that Get found.
type liveEntry struct {
	jetstream.KeyValueEntry
	key string
}

func (e liveEntry) Key() string      { return e.key }
func (e liveEntry) Value() []byte    { return []byte("held") }
func (e liveEntry) Revision() uint64 { return 3 }

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

// TestCreateTriesAgainWhenTheKeyIsFree: a Create that says the key exists
// while a read finds it free (its expiry marker ended in between) is tried
// again instead of ending as errKeyExists, which made a worker back from a
// network cut take its own name for another's and stop.
func TestCreateTriesAgainWhenTheKeyIsFree(t *testing.T) {
	ctx := context.Background()
	kv := &staleCreateKV{vanished: 2}
	rev, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil)
	if err != nil || rev != 7 || kv.calls != 3 {
		t.Fatalf("create of a free key reported as existing twice: rev %d, err %v, %d calls; want 7, nil, 3", rev, err, kv.calls)
	}
	kv = &staleCreateKV{vanished: 100}
	if _, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil); !errors.Is(err, errKeyExists) || kv.calls != createTries {
		t.Fatalf("create that keeps being refused: %v after %d calls; want errKeyExists after %d", err, kv.calls, createTries)
	}
	// A key that cannot be read is not known to be taken: the caller tries
	// again later rather than giving the name up.
	cut := errors.New("nats: timeout")
	kv = &staleCreateKV{vanished: 1, getErr: cut}
	if _, err := (&kvBucket{kv: kv}).create(ctx, "w1", nil); !errors.Is(err, cut) || errors.Is(err, errKeyExists) {
		t.Fatalf("create whose read failed: %v; want the read's error, not errKeyExists", err)
	}
}
