package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/checkpoint"
)

const topo = "wordcount"

// forStores runs test against each store the manifest layer is tested on.
func forStores(t *testing.T, test func(t *testing.T, s checkpoint.Store)) {
	t.Run("Memory", func(t *testing.T) { test(t, checkpoint.NewMemory()) })
	t.Run("Dir", func(t *testing.T) { test(t, newDir(t)) })
}

// tasks are the tasks of the test topology: a spout and two splitters.
var tasks = []struct {
	id        int
	component string
	index     int
}{{0, "source", 0}, {1, "split", 0}, {2, "split", 1}}

func state(task int, epoch uint64) []byte {
	return fmt.Appendf(nil, "state of task %d at epoch %d", task, epoch)
}

// writeTasks writes the blobs of every task of epoch, as the runtime does
// before it commits, and returns the manifest to commit.
func writeTasks(t testing.TB, s checkpoint.Store, epoch uint64, fingerprint string) checkpoint.Manifest {
	t.Helper()
	m := checkpoint.Manifest{
		Topology: topo, Fingerprint: fingerprint, Epoch: epoch,
		Started:  time.Date(2025, 6, 1, 12, 0, int(epoch), 0, time.UTC),
		Duration: 40 * time.Millisecond, Pause: 15 * time.Millisecond,
	}
	for _, task := range tasks {
		e, err := checkpoint.WriteTask(context.Background(), s, topo, epoch, task.id, task.component, task.index, state(task.id, epoch))
		if err != nil {
			t.Fatal(err)
		}
		if task.component == "source" {
			e.Position = fmt.Appendf(nil, "offset %d", epoch*100)
		}
		m.Tasks = append(m.Tasks, e)
	}
	return m
}

// commitEpochs writes and commits each epoch with fingerprint "v1".
func commitEpochs(t testing.TB, s checkpoint.Store, keep int, epochs ...uint64) {
	t.Helper()
	for _, epoch := range epochs {
		if err := checkpoint.Commit(context.Background(), s, writeTasks(t, s, epoch, "v1"), keep); err != nil {
			t.Fatal(err)
		}
	}
}

func manifestName(epoch uint64) string { return checkpoint.EpochPrefix(topo, epoch) + "MANIFEST" }

func taskName(epoch uint64, task int) string {
	return fmt.Sprintf("%stask-%d", checkpoint.EpochPrefix(topo, epoch), task)
}

func TestEpochPrefix(t *testing.T) {
	if got := checkpoint.EpochPrefix("wordcount", 12); got != "wordcount/epoch-00000000000000000012/" {
		t.Fatalf("EpochPrefix = %q", got)
	}
	if got := checkpoint.EpochPrefix("w", 1<<64-1); got != "w/epoch-18446744073709551615/" {
		t.Fatalf("EpochPrefix of the largest epoch = %q", got)
	}
}

func TestWriteTaskEntry(t *testing.T) {
	s := checkpoint.NewMemory()
	e, err := checkpoint.WriteTask(context.Background(), s, topo, 12, 3, "count", 1, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	want := checkpoint.TaskEntry{
		Task: 3, Component: "count", Index: 1,
		Object: "wordcount/epoch-00000000000000000012/task-3", Size: 5,
		SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
	}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("entry %+v, want %+v", e, want)
	}
	if got := get(t, s, e.Object); got != "hello" {
		t.Fatalf("stored %q", got)
	}
}

func TestWriteTaskRefuses(t *testing.T) {
	s := checkpoint.NewMemory()
	ctx := context.Background()
	for name, err := range map[string]error{
		"epoch 0":         second(checkpoint.WriteTask(ctx, s, topo, 0, 1, "c", 0, nil)),
		"negative task":   second(checkpoint.WriteTask(ctx, s, topo, 1, -1, "c", 0, nil)),
		"bad topology":    second(checkpoint.WriteTask(ctx, s, "a/b", 1, 1, "c", 0, nil)),
		"dotted topology": second(checkpoint.WriteTask(ctx, s, "a.b", 1, 1, "c", 0, nil)),
		"empty topology":  second(checkpoint.WriteTask(ctx, s, "", 1, 1, "c", 0, nil)),
		"spaced topology": second(checkpoint.WriteTask(ctx, s, "a b", 1, 1, "c", 0, nil)),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "checkpoint: ") {
			t.Errorf("%s: got %v, want a checkpoint error", name, err)
		}
	}
	if names := list(t, s, ""); len(names) != 0 {
		t.Fatalf("refused writes stored %q", names)
	}
}

func second[T any](_ T, err error) error { return err }

// The manifest is JSON for people, then the checksum line.
func TestManifestFormat(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 1, 7)
	data := []byte(get(t, s, manifestName(7)))
	if !regexp.MustCompile(`\n}\nsha256 [0-9a-f]{64}\n$`).Match(data) {
		t.Fatalf("manifest does not end with its checksum line:\n%s", data)
	}
	for _, field := range []string{`"topology": "wordcount"`, `"epoch": 7`, `"duration_ns": 40000000`, `"object": "wordcount/epoch-00000000000000000007/task-2"`} {
		if !bytes.Contains(data, []byte(field)) {
			t.Errorf("manifest lacks %s:\n%s", field, data)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	forStores(t, func(t *testing.T, s checkpoint.Store) {
		want := writeTasks(t, s, 12, "v1")
		if err := checkpoint.Commit(context.Background(), s, want, 3); err != nil {
			t.Fatal(err)
		}
		r, err := checkpoint.Latest(context.Background(), s, topo, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if !r.Manifest.Started.Equal(want.Started) {
			t.Fatalf("Started read back as %v, want %v", r.Manifest.Started, want.Started)
		}
		got := *r.Manifest
		got.Started = want.Started
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("manifest read back as\n%+v\nwant\n%+v", got, want)
		}
		if len(r.Blobs) != len(tasks) || len(r.Skipped) != 0 {
			t.Fatalf("%d blobs, skipped %v; want %d blobs, nothing skipped", len(r.Blobs), r.Skipped, len(tasks))
		}
		for _, task := range tasks {
			if !bytes.Equal(r.Blobs[task.id], state(task.id, 12)) {
				t.Errorf("task %d restored %q", task.id, r.Blobs[task.id])
			}
		}
	})
}

// Every way of cutting a manifest short or changing one of its bytes is
// refused, never read as another manifest.
func TestEveryDamagedManifestIsRefused(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 1, 3)
	good := []byte(get(t, s, manifestName(3)))
	check := func(what string, damaged []byte) {
		t.Helper()
		if err := s.Put(context.Background(), manifestName(3), damaged); err != nil {
			t.Fatal(err)
		}
		if _, err := checkpoint.ReadManifest(context.Background(), s, topo, 3); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("%s: ReadManifest returned %v, want ErrCorrupt", what, err)
		}
	}
	for n := range len(good) {
		check(fmt.Sprintf("truncated to %d bytes", n), good[:n])
	}
	for i := range good {
		damaged := bytes.Clone(good)
		damaged[i] ^= 0x01
		check(fmt.Sprintf("byte %d changed", i), damaged)
	}
}

func TestReadManifestMessages(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 1, 12)
	good := []byte(get(t, s, manifestName(12)))
	damaged := bytes.Clone(good)
	damaged[10] ^= 0x20
	cases := []struct {
		data []byte
		want string
	}{
		{damaged, "checkpoint: manifest for epoch 12 of wordcount has a bad checksum; refusing to restore it"},
		{good[:len(good)/2], "checkpoint: manifest for epoch 12 of wordcount is truncated: it does not end with its checksum line; refusing to restore it"},
	}
	for _, c := range cases {
		put(t, s, manifestName(12), string(c.data))
		_, err := checkpoint.ReadManifest(context.Background(), s, topo, 12)
		if err == nil || err.Error() != c.want || !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("got %v\nwant %s (wrapping ErrCorrupt)", err, c.want)
		}
	}
	_, err := checkpoint.ReadManifest(context.Background(), s, topo, 13)
	if !errors.Is(err, checkpoint.ErrNoCheckpoint) || !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), "epoch 13 of wordcount is incomplete") {
		t.Errorf("a missing manifest: got %v, want ErrNoCheckpoint saying epoch 13 is incomplete", err)
	}
}

// A manifest that verifies but belongs to another epoch (copied by hand)
// is refused: its entries point at another epoch's objects.
func TestCopiedManifestIsRefused(t *testing.T) {
	s := checkpoint.NewMemory()
	commitEpochs(t, s, 3, 4, 5)
	put(t, s, manifestName(5), get(t, s, manifestName(4)))
	_, err := checkpoint.ReadManifest(context.Background(), s, topo, 5)
	if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "is the manifest of epoch 4") {
		t.Fatalf("got %v, want ErrCorrupt saying it is the manifest of epoch 4", err)
	}
}

func TestReadTaskMessages(t *testing.T) {
	s := checkpoint.NewMemory()
	e, err := checkpoint.WriteTask(context.Background(), s, topo, 12, 3, "count", 1, []byte("0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	const what = "checkpoint: task 3 (count, index 1) of epoch 12 of wordcount, object wordcount/epoch-00000000000000000012/task-3, "
	cases := []struct {
		stored *string // nil: missing
		want   string
	}{
		{ptr("01234"), what + "is truncated: 5 of its 10 bytes; refusing to restore epoch 12"},
		{ptr("0123456789+"), what + "has 11 bytes where the manifest says 10; refusing to restore epoch 12"},
		{ptr("0123456788"), what + "has a bad checksum; refusing to restore epoch 12"},
		{nil, what + "is missing; refusing to restore epoch 12"},
	}
	for _, c := range cases {
		if c.stored == nil {
			del(t, s, e.Object)
		} else {
			put(t, s, e.Object, *c.stored)
		}
		_, err := checkpoint.ReadTask(context.Background(), s, e)
		if err == nil || err.Error() != c.want || !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("got %v\nwant %s (wrapping ErrCorrupt)", err, c.want)
		}
	}
}

func ptr(s string) *string { return &s }

func TestCommitRefuses(t *testing.T) {
	ctx := context.Background()
	s := checkpoint.NewMemory()
	m := writeTasks(t, s, 5, "v1")
	cases := map[string]struct {
		change func(m *checkpoint.Manifest)
		keep   int
		want   string
	}{
		"keep 0":        {func(*checkpoint.Manifest) {}, 0, "keep at least 1"},
		"epoch 0":       {func(m *checkpoint.Manifest) { m.Epoch = 0 }, 1, "epochs start at 1"},
		"bad topology":  {func(m *checkpoint.Manifest) { m.Topology = "a/b" }, 1, "use letters, digits"},
		"another epoch": {func(m *checkpoint.Manifest) { m.Epoch = 6 }, 1, "not that task's object in this epoch"},
		"twice":         {func(m *checkpoint.Manifest) { m.Tasks = append(m.Tasks, m.Tasks[0]) }, 1, "lists task 0 twice"},
		"no checksum":   {func(m *checkpoint.Manifest) { m.Tasks[1].SHA256 = "" }, 1, "no valid size and checksum for task 1"},
		"not written": {func(m *checkpoint.Manifest) {
			m.Tasks = append(m.Tasks, checkpoint.TaskEntry{Task: 9, Component: "c", Object: taskName(5, 9), SHA256: strings.Repeat("0", 64)})
		}, 1, "task 9 (c, index 0) has no object wordcount/epoch-00000000000000000005/task-9 in the store; write every task with WriteTask before Commit"},
	}
	for name, c := range cases {
		bad := m
		bad.Tasks = append([]checkpoint.TaskEntry(nil), m.Tasks...)
		c.change(&bad)
		err := checkpoint.Commit(ctx, s, bad, c.keep)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
	if _, err := s.Get(ctx, manifestName(5)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("a refused Commit wrote a manifest: %v", err)
	}
}
