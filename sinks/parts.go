package sinks

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A File sink's task i names its files, for epoch e:
//
//	.<name>-<i>-<e>.<token>.pending written or pre-committed, not visible
//	<name>-<i>-<e, 20 digits>.part  committed
//
// The token (8 hex digits) is drawn by each instance of the task that
// takes checkpoints: a worker paused past its lease that wakes up may
// still write for a while, and its files must not mix with its
// successor's, which writes the same epochs. Without checkpoints a
// restarted task appends to its predecessor's file, which has no token:
// .<name>-<i>-<e>.pending. The dot hides pending files from ls and globs
// such as name-*; the zero-padded epoch makes a directory listing sort
// parts by epoch.

const (
	pendingSuffix = ".pending"
	partSuffix    = ".part"
	tokenLen      = 8
)

func pendingName(name string, task int, epoch uint64, token string) string {
	if token != "" {
		return fmt.Sprintf(".%s-%d-%d.%s%s", name, task, epoch, token, pendingSuffix)
	}
	return fmt.Sprintf(".%s-%d-%d%s", name, task, epoch, pendingSuffix)
}

// isToken reports whether s is a token of pendingName.
func isToken(s string) bool {
	return len(s) == tokenLen && strings.Trim(s, "0123456789abcdef") == ""
}

func partName(name string, task int, epoch uint64) string {
	return fmt.Sprintf("%s-%d-%020d%s", name, task, epoch, partSuffix)
}

// part is one file of a File sink found in a directory.
type part struct {
	file    string // base name
	task    int
	epoch   uint64
	pending bool
	token   string // of a pending file written with checkpoints
}

// parseFile reads a base name written by pendingName or partName for name.
// Names of other sinks in the same directory do not parse, even when their
// name starts with name (out and out-1): the rest must be exactly
// <task>-<epoch> (and a token for a pending file).
func parseFile(file, name string) (part, bool) {
	p := part{file: file}
	rest, ok := strings.CutSuffix(file, partSuffix)
	if !ok {
		if rest, ok = strings.CutSuffix(file, pendingSuffix); !ok {
			return p, false
		}
		if rest, ok = strings.CutPrefix(rest, "."); !ok {
			return p, false
		}
		p.pending = true
		if i := strings.LastIndexByte(rest, '.'); i >= 0 && isToken(rest[i+1:]) {
			rest, p.token = rest[:i], rest[i+1:]
		}
	}
	rest, ok = strings.CutPrefix(rest, name+"-")
	if !ok {
		return p, false
	}
	task, epoch, ok := strings.Cut(rest, "-")
	if !ok || !digits(task) || !digits(epoch) || (!p.pending && len(epoch) != 20) {
		return p, false
	}
	t, err1 := strconv.Atoi(task)
	e, err2 := strconv.ParseUint(epoch, 10, 64)
	p.task, p.epoch = t, e
	return p, err1 == nil && err2 == nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// scan lists the files of sink name in dir, in epoch order then task order.
func scan(dir, name string) ([]part, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sinks: listing %s: %w; check that the directory exists and is readable", dir, err)
	}
	var parts []part
	for _, e := range entries {
		if p, ok := parseFile(e.Name(), name); ok && e.Type().IsRegular() {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(a, b part) int {
		if a.epoch != b.epoch {
			return cmpUint(a.epoch, b.epoch)
		}
		return a.task - b.task
	})
	return parts, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReadParts returns the contents of the committed parts of the File sink
// named name in dir, in epoch order, then task order within an epoch.
// Pending files (not yet committed) are left out.
func ReadParts(dir, name string) ([][]byte, error) {
	parts, err := scan(dir, name)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, p := range parts {
		if p.pending {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, p.file))
		if err != nil {
			return nil, fmt.Errorf("sinks: reading %s: %w", filepath.Join(dir, p.file), err)
		}
		out = append(out, b)
	}
	return out, nil
}

// Lines returns the lines of the committed parts (see ReadParts), without
// their newlines: the records, for the default Format.
func Lines(dir, name string) ([]string, error) {
	parts, err := ReadParts(dir, name)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, b := range parts {
		for len(b) > 0 {
			line, rest, _ := bytes.Cut(b, []byte{'\n'})
			lines = append(lines, string(line))
			b = rest
		}
	}
	return lines, nil
}

// syncDir makes renames, creations and removals in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sinks: opening %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sinks: syncing directory %s: %w; its latest files may not survive a machine crash", dir, err)
	}
	return nil
}
