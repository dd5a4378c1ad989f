package deadletter_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/deadletter/sinktest"
)

func TestFileIsCreatedAtTheFirstPut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	f := deadletter.NewFile(path)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a sink that got no letter left %s behind (stat: %v)", path, err)
	}

	f = deadletter.NewFile(path)
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("NewFile created %s before any Put (stat: %v)", path, err)
	}
	if err := f.Put(t.Context(), sinktest.SampleLetter(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the first Put did not create the file: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A second run appends to the letters of the first instead of replacing them.
func TestFileAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	for id := range uint64(2) {
		f := deadletter.NewFile(path)
		if err := f.Put(t.Context(), sinktest.SampleLetter(id)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	letters, err := deadletter.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 2 || letters[0].RecordID != 0 || letters[1].RecordID != 1 {
		t.Fatalf("read %+v, want records 0 and 1 in order", letters)
	}
}

func TestFileInMissingDirectorySaysWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "dead.jsonl")
	f := deadletter.NewFile(path)
	defer f.Close()
	err := f.Put(t.Context(), sinktest.SampleLetter(1))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want an error wrapping fs.ErrNotExist", err)
	}
	for _, want := range []string{"deadletter: cannot create " + path, "--dead-letters"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestReadFileOfMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	_, err := deadletter.ReadFile(path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want an error naming %s and wrapping fs.ErrNotExist", err, path)
	}
}

func TestReadNamesTheBadLine(t *testing.T) {
	good := `{"record_id":"1","values":[{"type":"int64","value":"1"}]}`
	cases := []struct{ name, input, want string }{
		{"not JSON", good + "\n\n" + "{oops\n" + good + "\n", "deadletter: line 3 is not a letter"},
		{"unknown value type", good + "\n" + `{"values":[{"type":"int128","value":"1"}]}` + "\n", `deadletter: line 2 is not a letter: value 0: unknown value type "int128"`},
		{"torn last line", good + "\n" + good[:20], "deadletter: line 2 is not a letter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := deadletter.Read(strings.NewReader(c.input))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	_, err := deadletter.Read(strings.NewReader(good + "\n" + good[:20]))
	if !strings.Contains(err.Error(), "a write was cut short") {
		t.Errorf("a torn last line is not explained: %v", err)
	}
}

func TestReadFileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.jsonl")
	if err := os.WriteFile(path, []byte("{oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := deadletter.ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), path+" line 1 is not a letter") {
		t.Fatalf("got %v, want an error naming %s line 1", err, path)
	}
}

func TestReadSkipsBlankLinesAndReadsALastLineWithoutNewline(t *testing.T) {
	good := `{"record_id":"7","values":[]}`
	letters, err := deadletter.Read(strings.NewReader("\n" + good + "\n  \n" + good))
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 2 || letters[1].RecordID != 7 {
		t.Fatalf("read %+v, want two letters of record 7", letters)
	}
}
