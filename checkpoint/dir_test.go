package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/checkpoint"
)

func TestNewDirRefusesAMissingRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "nope")
	_, err := checkpoint.NewDir(root)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "mkdir -p "+root) {
		t.Fatalf("got %v, want an error that says the directory does not exist and how to create it", err)
	}
}

func TestNewDirRefusesAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.NewDir(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("got %v, want an error that says it is not a directory", err)
	}
}

func TestNewDirRefusesAnUnwritableRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root can write to any directory")
	}
	root := t.TempDir()
	if err := os.Chmod(root, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(root, 0o755)
	if _, err := checkpoint.NewDir(root); err == nil || !strings.Contains(err.Error(), "make it writable") {
		t.Fatalf("got %v, want an error that says to make it writable", err)
	}
}

func TestDirNamesAreSubdirectories(t *testing.T) {
	d := newDir(t)
	put(t, d, "wordcount/epoch-00000000000000000012/task-3", "state")
	got, err := os.ReadFile(filepath.Join(d.Root(), "wordcount", "epoch-00000000000000000012", "task-3"))
	if err != nil || string(got) != "state" {
		t.Fatalf("the object's file holds %q, %v", got, err)
	}
	entries, err := os.ReadDir(filepath.Join(d.Root(), "wordcount", "epoch-00000000000000000012"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the directory holds %v, %v; want the object alone (no temporary file left)", entries, err)
	}
}

// A crash during Put leaves a temporary file beside the object: it must
// neither show in List nor replace the object.
func TestDirHidesWhatACrashedPutLeft(t *testing.T) {
	d := newDir(t)
	put(t, d, "t/x", "old")
	dir := filepath.Join(d.Root(), "t")
	for _, name := range []string{"x~1234", "y~5678"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("par"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(d.Root(), "lost+found"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := list(t, d, ""); !slices.Equal(got, []string{"t/x"}) {
		t.Fatalf("List = %q, want [t/x]", got)
	}
	if got := get(t, d, "t/x"); got != "old" {
		t.Fatalf("Get = %q, want the old object", got)
	}
	// Deleting the last object removes the directory, temporary files and all.
	if err := d.Delete(context.Background(), "t/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the emptied directory is still there: %v", err)
	}
}

func TestDirDeletePrunesEmptyDirectories(t *testing.T) {
	d := newDir(t)
	put(t, d, "wc/epoch-1/task-0", "a")
	put(t, d, "wc/epoch-2/task-0", "b")
	del(t, d, "wc/epoch-1/task-0")
	if _, err := os.Stat(filepath.Join(d.Root(), "wc", "epoch-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("epoch-1 is still there: %v", err)
	}
	del(t, d, "wc") // a directory is not an object
	if got := get(t, d, "wc/epoch-2/task-0"); got != "b" {
		t.Fatalf("deleting a directory's name changed its objects: %q", got)
	}
	del(t, d, "wc/epoch-2/task-0")
	if entries, err := os.ReadDir(d.Root()); err != nil || len(entries) != 0 {
		t.Fatalf("the root still holds %v, %v", entries, err)
	}
}

func TestDirRefusesAnObjectUnderAnObject(t *testing.T) {
	d := newDir(t)
	put(t, d, "a/b", "b")
	err := d.Put(context.Background(), "a/b/c", []byte("c"))
	if err == nil || !strings.Contains(err.Error(), "a/b is an object") {
		t.Fatalf("got %v, want an error that says a/b is an object", err)
	}
}

func TestDirThroughASymlinkedRoot(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Skip("no symlinks here:", err)
	}
	d, err := checkpoint.NewDir(link)
	if err != nil {
		t.Fatal(err)
	}
	put(t, d, "a/b", "x")
	if got := list(t, d, ""); !slices.Equal(got, []string{"a/b"}) {
		t.Fatalf("List = %q through a linked root", got)
	}
}

func put(t *testing.T, s checkpoint.Store, name, data string) {
	t.Helper()
	if err := s.Put(context.Background(), name, []byte(data)); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s checkpoint.Store, name string) string {
	t.Helper()
	data, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func list(t *testing.T, s checkpoint.Store, prefix string) []string {
	t.Helper()
	names, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func del(t *testing.T, s checkpoint.Store, name string) {
	t.Helper()
	if err := s.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
}
