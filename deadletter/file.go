package deadletter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// File is a Sink that appends letters to a JSON-lines file, one letter per
// line. Dead letters are rare and each one is a record given up on, so every
// Put is fsynced: losing one in a crash costs more than the fsync.
type File struct {
	path string

	mu     sync.Mutex
	f      *os.File // nil until the first Put
	closed bool
	// torn is set when a write stopped part-way through a line; the next
	// line then starts with a newline so that it is not glued to the torn
	// one, and only the torn letter needs repair.
	torn bool
}

// NewFile returns a sink that appends to path. The file is created at the
// first Put, so a run with nothing dead-lettered leaves no file behind; its
// directory must exist by then.
func NewFile(path string) *File { return &File{path: path} }

// Path is the file the letters go to.
func (s *File) Path() string { return s.path }

// Put appends l as one line, in one write, and fsyncs. It does not look at
// ctx: a local write does not wait on anything a context could cancel, and
// refusing a letter during shutdown would lose it.
func (s *File) Put(_ context.Context, l Letter) error {
	b, err := encode(l)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.open(); err != nil {
		return err
	}
	return s.write(append(b, '\n'))
}

func (s *File) open() error {
	if s.f != nil {
		return nil
	}
	f, err := os.OpenFile(s.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("deadletter: cannot create %s: %w; pass a writable path in an existing directory with --dead-letters", s.path, err)
	}
	syncDir(filepath.Dir(s.path))
	s.f = f
	return nil
}

// syncDir makes a newly created file's directory entry survive a crash.
// It is best effort: some file systems refuse to fsync a directory, and the
// letters themselves are fsynced either way.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

func (s *File) write(line []byte) error {
	if s.torn {
		line = append([]byte{'\n'}, line...)
	}
	n, err := s.f.Write(line)
	if err != nil {
		if n > 0 {
			s.torn = true
		}
		return fmt.Errorf("deadletter: writing a letter to %s: %w; the letter is not stored: free disk space or fix permissions, then retry", s.path, err)
	}
	s.torn = false
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("deadletter: fsync of %s: %w; the letter is written but may not survive a crash; check the disk", s.path, err)
	}
	return nil
}

// Close closes the file, if the first Put opened it.
func (s *File) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.f == nil {
		return nil
	}
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("deadletter: closing %s: %w", s.path, err)
	}
	return nil
}

// ReadFile reads the letters a File sink wrote to path. A missing file is
// an error that wraps fs.ErrNotExist: it usually means nothing was
// dead-lettered, since the file is created at the first letter, but it may
// be a wrong path, and only the caller knows which.
func ReadFile(path string) ([]Letter, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("deadletter: %s does not exist: nothing was dead-lettered there (the file is created at the first letter), or the path is wrong: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: cannot open %s: %w", path, err)
	}
	defer f.Close()
	return read(f, path+" ")
}

// Read reads JSON-lines letters, as a File sink writes them. Blank lines are
// skipped; a line that is not a letter is an error that names its number.
func Read(r io.Reader) ([]Letter, error) { return read(r, "") }

// read is Read with name (a file name and a space, or "") in its errors.
func read(r io.Reader, name string) ([]Letter, error) {
	br := bufio.NewReader(r) // not a Scanner: a letter with large values is a long line
	var letters []Letter
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("deadletter: reading %sline %d: %w", name, n, err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var l Letter
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return nil, badLine(name, n, line, jerr)
			}
			letters = append(letters, l)
		}
		if err == io.EOF {
			return letters, nil
		}
	}
}

func badLine(name string, n int, line []byte, err error) error {
	hint := "fix or delete that line to read the others"
	if !bytes.HasSuffix(line, []byte("\n")) {
		hint = "it has no newline at the end, so a write was cut short (a crash or a full disk); delete that line to read the others"
	}
	return fmt.Errorf("deadletter: %sline %d is not a letter: %w; %s", name, n, err, hint)
}
