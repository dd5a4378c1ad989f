package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/checkpoint"
)

// latestEpoch restores and checks that the blobs are those of the epoch
// restored.
func latestEpoch(t *testing.T, s checkpoint.Store) *checkpoint.Restore {
	t.Helper()
	r, err := checkpoint.Latest(context.Background(), s, topo, "v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if !bytes.Equal(r.Blobs[task.id], state(task.id, r.Manifest.Epoch)) {
			t.Fatalf("task %d restored %q from epoch %d", task.id, r.Blobs[task.id], r.Manifest.Epoch)
		}
	}
	return r
}

// damage changes an object of a committed epoch the way a failure would.
type damage struct {
	name   string
	object func(epoch uint64) string
	change func(t *testing.T, s checkpoint.Store, name string)
	reason string // in the error that says why the epoch is refused
}

var damages = []damage{
	{"TruncatedManifest", manifestName, truncate, "manifest for epoch %d of wordcount is truncated"},
	{"CorruptedManifest", manifestName, flip, "manifest for epoch %d of wordcount has a bad checksum"},
	{"MissingTask", task1, del, "task 1 (split, index 0) of epoch %d of wordcount, object wordcount/epoch-%020[1]d/task-1, is missing"},
	{"TruncatedTask", task1, truncate, "task 1 (split, index 0) of epoch %d of wordcount, object wordcount/epoch-%020[1]d/task-1, is truncated"},
	{"CorruptedTask", task1, flip, "task 1 (split, index 0) of epoch %d of wordcount, object wordcount/epoch-%020[1]d/task-1, has a bad checksum"},
}

func task1(epoch uint64) string { return taskName(epoch, 1) }

func truncate(t *testing.T, s checkpoint.Store, name string) {
	data := get(t, s, name)
	put(t, s, name, data[:len(data)-7])
}

func flip(t *testing.T, s checkpoint.Store, name string) {
	data := []byte(get(t, s, name))
	data[len(data)/3] ^= 0x04
	put(t, s, name, string(data))
}

func reason(d damage, epoch uint64) string { return fmt.Sprintf(d.reason, epoch) }

func TestDamagedNewestEpochFallsBack(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			forStores(t, func(t *testing.T, s checkpoint.Store) {
				commitEpochs(t, s, 3, 1, 2)
				d.change(t, s, d.object(2))
				r := latestEpoch(t, s)
				if r.Manifest.Epoch != 1 {
					t.Fatalf("restored epoch %d, want 1", r.Manifest.Epoch)
				}
				if len(r.Skipped) != 1 || !errors.Is(r.Skipped[0], checkpoint.ErrCorrupt) {
					t.Fatalf("Skipped = %v, want one ErrCorrupt", r.Skipped)
				}
				if want := reason(d, 2); !strings.Contains(r.Skipped[0].Error(), want) {
					t.Fatalf("skipped because %q\nwant it to say %q", r.Skipped[0], want)
				}
			})
		})
	}
}

func TestNoUsableEpochListsEveryReason(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 5, 1, 2, 3)
		writeTasks(t, s, 4, "v1") // incomplete
		for i, d := range damages[:3] {
			d.change(t, s, d.object(uint64(i+1)))
		}
		_, err := checkpoint.Latest(context.Background(), s, topo, "v1")
		if !errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Fatalf("got %v, want ErrCorrupt and not ErrNoCheckpoint", err)
		}
		for i, d := range damages[:3] {
			if want := reason(d, uint64(i+1)); !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%v", want, err)
			}
		}
		if !strings.Contains(err.Error(), "epoch 4 of wordcount is incomplete") {
			t.Errorf("the error does not mention incomplete epoch 4:\n%v", err)
		}
	})
}

func TestNoEpochIsNoCheckpoint(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		// Another topology whose name starts with this one's is not it.
		put(t, s, checkpoint.EpochPrefix(topo+"2", 1)+"MANIFEST", "x")
		_, err := checkpoint.Latest(context.Background(), s, topo, "v1")
		if !errors.Is(err, checkpoint.ErrNoCheckpoint) || errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("got %v, want ErrNoCheckpoint", err)
		}
	})
}

// A crash after the task blobs and before the manifest leaves an
// incomplete epoch, which is never restored.
func TestCrashBeforeManifestIsIgnored(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		writeTasks(t, s, 1, "v1")
		_, err := checkpoint.Latest(context.Background(), s, topo, "v1")
		if !errors.Is(err, checkpoint.ErrNoCheckpoint) || errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("only an incomplete epoch: got %v, want ErrNoCheckpoint", err)
		}
		commitEpochs(t, s, 3, 2)
		writeTasks(t, s, 3, "v1")
		r := latestEpoch(t, s)
		if r.Manifest.Epoch != 2 {
			t.Fatalf("restored epoch %d, want 2", r.Manifest.Epoch)
		}
		if len(r.Skipped) != 1 || !errors.Is(r.Skipped[0], checkpoint.ErrNoCheckpoint) || !strings.Contains(r.Skipped[0].Error(), "epoch 3 of wordcount is incomplete") {
			t.Fatalf("Skipped = %v, want epoch 3 as incomplete", r.Skipped)
		}
	})
}

func TestAnotherFingerprintIsRefused(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 3, 1, 2)
		flip(t, s, manifestName(2))
		_, err := checkpoint.Latest(context.Background(), s, topo, "v2")
		if !errors.Is(err, checkpoint.ErrTopologyChanged) || errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Fatalf("got %v, want ErrTopologyChanged alone", err)
		}
		for _, want := range []string{"topology wordcount changed", "epoch 1", `"v1"`, `"v2"`, "manifest for epoch 2 of wordcount has a bad checksum"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q:\n%v", want, err)
			}
		}
	})
}

func TestRetention(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 2, 1, 2)
		writeTasks(t, s, 3, "v1") // incomplete, older than the next commit
		commitEpochs(t, s, 2, 4)
		if got := epochs(t, s); !slices.Equal(got, []uint64{4, 2}) {
			t.Fatalf("after committing 4 with keep=2, epochs %v remain, want [4 2]", got)
		}
		writeTasks(t, s, 6, "v1") // newer than the next commit: left alone
		commitEpochs(t, s, 2, 5)
		if got := epochs(t, s); !slices.Equal(got, []uint64{6, 5, 4}) {
			t.Fatalf("after committing 5 with keep=2, epochs %v remain, want [6 5 4]", got)
		}
	})
}

// An epoch whose manifest is corrupt does not count as one of the kept
// ones, and stays (for people to look at) until it is out of the window.
func TestRetentionCountsOnlyVerifiedManifests(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 3, 1, 2)
		flip(t, s, manifestName(2))
		commitEpochs(t, s, 2, 3)
		if got := epochs(t, s); !slices.Equal(got, []uint64{3, 2, 1}) {
			t.Fatalf("epochs %v remain, want [3 2 1]", got)
		}
		commitEpochs(t, s, 2, 4)
		if got := epochs(t, s); !slices.Equal(got, []uint64{4, 3}) {
			t.Fatalf("epochs %v remain, want [4 3]", got)
		}
	})
}

func epochs(t *testing.T, s checkpoint.Store) []uint64 {
	t.Helper()
	infos, err := checkpoint.ListEpochs(context.Background(), s, topo)
	if err != nil {
		t.Fatal(err)
	}
	var epochs []uint64
	for _, info := range infos {
		epochs = append(epochs, info.Epoch)
	}
	return epochs
}

func TestListEpochs(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 5, 1, 2)
		flip(t, s, manifestName(2))
		writeTasks(t, s, 3, "v1")
		infos, err := checkpoint.ListEpochs(context.Background(), s, topo)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 3 {
			t.Fatalf("%d epochs, want 3: %+v", len(infos), infos)
		}
		incomplete, corrupt, good := infos[0], infos[1], infos[2]
		if incomplete.Epoch != 3 || incomplete.Complete || incomplete.Manifest != nil || !errors.Is(incomplete.Err, checkpoint.ErrNoCheckpoint) || incomplete.Objects != 3 || incomplete.Size != 0 {
			t.Errorf("incomplete epoch: %+v", incomplete)
		}
		if corrupt.Epoch != 2 || corrupt.Complete || corrupt.Manifest != nil || !errors.Is(corrupt.Err, checkpoint.ErrCorrupt) || corrupt.Objects != 4 {
			t.Errorf("corrupt epoch: %+v", corrupt)
		}
		var size int64
		for _, task := range tasks {
			size += int64(len(state(task.id, 1)))
		}
		if good.Epoch != 1 || !good.Complete || good.Manifest == nil || good.Manifest.Epoch != 1 || good.Err != nil || good.Objects != 4 || good.Size != size {
			t.Errorf("complete epoch: %+v, want size %d", good, size)
		}
	})
}

func TestTopologies(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		for _, name := range []string{"b/epoch-00000000000000000001/task-0", "a/epoch-00000000000000000002/MANIFEST", "a-b/epoch-00000000000000000001/task-0", "a/epoch-00000000000000000001/task-0", "notes/readme", "c/epoch-1/task-0", "top"} {
			put(t, s, name, "x")
		}
		got, err := checkpoint.Topologies(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "a-b", "b"}; !slices.Equal(got, want) {
			t.Fatalf("Topologies = %q, want %q", got, want)
		}
	})
}

// failing is a store whose Get or Delete fails for chosen names, as a
// store that cannot be reached does.
type failing struct {
	checkpoint.Store
	get, delete func(name string) bool
}

var errUnreachable = errors.New("store unreachable")

func (f failing) Get(ctx context.Context, name string) ([]byte, error) {
	if f.get != nil && f.get(name) {
		return nil, errUnreachable
	}
	return f.Store.Get(ctx, name)
}

func (f failing) Delete(ctx context.Context, name string) error {
	if f.delete != nil && f.delete(name) {
		return errUnreachable
	}
	return f.Store.Delete(ctx, name)
}

// A store that cannot be read is no reason to go back to an older epoch.
func TestLatestDoesNotFallBackOnAStoreError(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 3, 1, 2)
	for _, name := range []string{manifestName(2), taskName(2, 1)} {
		f := failing{Store: s, get: func(n string) bool { return n == name }}
		_, err := checkpoint.Latest(context.Background(), f, topo, "v1")
		if !errors.Is(err, errUnreachable) || errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("Get of %s failing: got %v, want the store's error", name, err)
		}
	}
}

func TestRetentionFailureLeavesTheEpochComplete(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 1, 1)
	f := failing{Store: s, delete: func(string) bool { return true }}
	err := checkpoint.Commit(context.Background(), f, writeTasks(t, s, 2, "v1"), 1)
	if !errors.Is(err, checkpoint.ErrRetention) || !errors.Is(err, errUnreachable) || !strings.Contains(err.Error(), "epoch 2 of wordcount is complete") {
		t.Fatalf("got %v, want ErrRetention saying epoch 2 is complete", err)
	}
	if r := latestEpoch(t, s); r.Manifest.Epoch != 2 {
		t.Fatalf("restored epoch %d, want 2", r.Manifest.Epoch)
	}
	commitEpochs(t, s, 1, 3) // the next commit deletes what the failed one left
	if got := epochs(t, s); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("epochs %v remain, want [3]", got)
	}
}

// Load restores the epoch asked for, not the newest, and refuses a damaged
// or missing one without falling back.
func TestLoadReadsTheEpochAskedFor(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		commitEpochs(t, s, 5, 1, 2, 3)
		writeTasks(t, s, 4, "v1") // incomplete
		r, err := checkpoint.Load(context.Background(), s, topo, 2, "v1")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if !bytes.Equal(r.Blobs[task.id], state(task.id, 2)) {
				t.Fatalf("task %d restored %q, want epoch 2's", task.id, r.Blobs[task.id])
			}
		}
		if _, err := checkpoint.Load(context.Background(), s, topo, 4, "v1"); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Fatalf("incomplete epoch 4: %v", err)
		}
		if _, err := checkpoint.Load(context.Background(), s, topo, 9, "v1"); !errors.Is(err, checkpoint.ErrNoCheckpoint) {
			t.Fatalf("missing epoch 9: %v", err)
		}
		if _, err := checkpoint.Load(context.Background(), s, topo, 3, "v2"); !errors.Is(err, checkpoint.ErrTopologyChanged) {
			t.Fatalf("another fingerprint: %v", err)
		}
		flip(t, s, task1(1))
		if _, err := checkpoint.Load(context.Background(), s, topo, 1, "v1"); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("damaged epoch 1: %v", err)
		}
	})
}
