package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Dir is a Store in a local directory, for local mode: each name is a path
// under the root, its segments subdirectories. An object is written to a
// temporary file beside it, fsynced, and renamed into place, so a crash
// leaves either the old object or the new one, never a part.
type Dir struct {
	root string
	// mu keeps the removal of empty directories (by Delete) away from a Put
	// that has created a directory and not yet renamed its object into it:
	// Puts and unlinks share it, removing directories takes it alone.
	mu sync.RWMutex
}

// NewDir returns a store in root, which must be an existing directory this
// process can write to: it is checked now, so that a run fails at its start
// rather than at its first checkpoint.
func NewDir(root string) (*Dir, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: checkpoint directory %s: %w; pass an absolute path", root, err)
	}
	// Resolved, because List walks the tree without following links, and a
	// root that is a link to the real directory is a common setup.
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: checkpoint directory %s does not exist; create it (mkdir -p %s) or choose another", abs, abs)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: checkpoint directory %s: %w; check the path and its permissions", abs, err)
	}
	if err := probe(resolved); err != nil {
		return nil, err
	}
	return &Dir{root: resolved}, nil
}

// probe checks that dir is a directory in which a file can be created.
func probe(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: checkpoint directory %s: %w; check the path and its permissions", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("checkpoint: checkpoint directory %s is not a directory; choose a directory", dir)
	}
	f, err := os.CreateTemp(dir, "probe~*")
	if err != nil {
		return fmt.Errorf("checkpoint: cannot write in checkpoint directory %s: %w; make it writable by the user this process runs as, or choose another", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// Root is the directory the objects are in, with links resolved.
func (d *Dir) Root() string { return d.root }

func (d *Dir) path(name string) string { return filepath.Join(d.root, filepath.FromSlash(name)) }

func (d *Dir) where() string { return "directory " + d.root }

// Put writes data beside the object's path and renames it into place. A
// name that needs a directory where an object is ("a/b/c" with an object
// "a/b") fails: a directory store cannot hold both.
func (d *Dir) Put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	path := d.path(name)
	d.mu.RLock()
	defer d.mu.RUnlock()
	err := d.mkdirs(filepath.Dir(path))
	if err == nil {
		err = writeAtomic(path, data)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: cannot store %s in %s: %w; the object is unchanged: free disk space or fix permissions, then retry", name, d.where(), err)
	}
	return nil
}

// mkdirs creates the missing directories from the root down to dir, and
// fsyncs the parent of each, since an object renamed into a directory whose
// own entry is lost in a crash is lost with it.
func (d *Dir) mkdirs(dir string) error {
	if dir == d.root {
		return nil
	}
	info, err := os.Stat(dir)
	if err == nil {
		if !info.IsDir() {
			return fmt.Errorf("%s is an object, so it cannot also hold objects", d.name(dir))
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if err := d.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

// writeAtomic replaces path with data. The temporary file's name has a '~',
// which no valid name segment has, so List never shows it.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+"~*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func isTemp(base string) bool { return strings.Contains(base, "~") }

// syncDir makes the entries created, renamed or removed in dir survive a
// crash. Some file systems cannot fsync a directory and say so with EINVAL
// or ENOTSUP; there an entry is as durable as the file system makes it, and
// failing every Put would not make it more so.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	return nil
}

// Get reads the object. A directory is not an object: its name is not found.
func (d *Dir) Get(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	path := d.path(name)
	data, err := os.ReadFile(path)
	if err == nil {
		return data, nil
	}
	if missing(err) || isDir(path) {
		return nil, notFound(name, d.where(), err)
	}
	return nil, fmt.Errorf("checkpoint: cannot read %s in %s: %w; check the disk and the directory's permissions", name, d.where(), err)
}

// missing says whether err means that nothing is at a path: ENOTDIR is the
// error when a segment of it is a file.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// name is the object name of a path under the root.
func (d *Dir) name(path string) string {
	rel, err := filepath.Rel(d.root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// List walks the directory of prefix's last complete segment and keeps the
// regular files whose names are valid and start with prefix. Things that
// vanish during the walk (a concurrent Delete) are skipped.
func (d *Dir) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, err
	}
	start := d.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = d.path(prefix[:i])
	}
	var names []string
	err := filepath.WalkDir(start, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if missing(err) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := d.name(path)
		if e.IsDir() {
			if path == start || mayHold(name, prefix) {
				return nil
			}
			return fs.SkipDir
		}
		if e.Type().IsRegular() && strings.HasPrefix(name, prefix) && CheckName(name) == nil {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: cannot list %q in %s: %w; check the directory's permissions", prefix, d.where(), err)
	}
	slices.Sort(names) // the walk's order puts "a/b/x" before "a/b-c"; names sort as strings
	return names, nil
}

// mayHold says whether directory dir can hold a name that starts with prefix.
func mayHold(dir, prefix string) bool {
	return strings.HasPrefix(dir+"/", prefix) || strings.HasPrefix(prefix, dir+"/")
}

// Delete removes the object and then the directories it leaves empty, so
// deleted epochs leave no trace. A directory is not an object: deleting its
// name does nothing.
func (d *Dir) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	path := d.path(name)
	if err := d.unlink(path); err != nil {
		return fmt.Errorf("checkpoint: cannot delete %s in %s: %w; check the directory's permissions", name, d.where(), err)
	}
	d.prune(filepath.Dir(path))
	return nil
}

func (d *Dir) unlink(path string) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	info, err := os.Lstat(path)
	if err != nil && missing(err) || err == nil && info.IsDir() {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !missing(err) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// prune removes dir and its parents up to the root while they hold no
// object. It is best effort: a directory that stays is invisible to List.
func (d *Dir) prune(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dir != d.root && strings.HasPrefix(dir, d.root+string(filepath.Separator)) {
		if !removeEmpty(dir) {
			return
		}
		dir = filepath.Dir(dir)
		_ = syncDir(dir)
	}
}

// removeEmpty removes dir if it holds nothing but temporary files: those
// are what a Put cut short by a crash leaves behind, since with d.mu held
// alone no Put of this store is writing one. (A Put of another process
// writing into the same directory would fail at its rename, and leave no
// partial object.)
func removeEmpty(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() || !isTemp(e.Name()) {
			return false
		}
	}
	for _, e := range entries {
		if os.Remove(filepath.Join(dir, e.Name())) != nil {
			return false
		}
	}
	return os.Remove(dir) == nil
}
