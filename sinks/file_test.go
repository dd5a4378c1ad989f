package sinks

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/rs/zerolog"
)

// fileTask prepares task index of a File sink named "out" in dir; with
// checkpoints unless every is 0.
func fileTask(t *testing.T, dir string, index int, every time.Duration) (*File, *collector) {
	t.Helper()
	c := newCollector()
	s := NewFile(FileConfig{Dir: dir, Name: "out"})().(*File)
	tc := topology.TaskContext{Component: "sink", Index: index, Parallelism: 2, CheckpointEvery: every, Logger: zerolog.Nop()}
	if err := s.Prepare(tc, c); err != nil {
		t.Fatal(err)
	}
	return s, c
}

func write(s *File, first uint64, lines ...string) {
	for i, l := range lines {
		s.Execute(tuple(first+uint64(i), l))
	}
}

func mustLines(t *testing.T, dir string, want ...string) {
	t.Helper()
	got, err := Lines(dir, "out")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("committed lines %q, want %q", got, want)
	}
}

// checkpoint does what the runtime does for checkpoint epoch: Snapshot,
// then PreCommit. It returns the snapshot.
func checkpoint(t *testing.T, s *File, epoch uint64) []byte {
	t.Helper()
	snap, err := s.Snapshot()
	mustOK(t, err)
	mustOK(t, s.PreCommit(epoch))
	return snap
}

// restart prepares a new instance of task index, restores snap (nil: no
// checkpoint) and recovers from epoch, as a task restarting from that
// checkpoint.
func restart(t *testing.T, dir string, index int, snap []byte, epoch uint64) *File {
	t.Helper()
	s, _ := fileTask(t, dir, index, time.Second)
	mustOK(t, s.Restore(snap))
	mustOK(t, s.Recover(epoch))
	return s
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// files lists dir's names, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestFileShowsAnEpochOnlyOnceCommitted(t *testing.T) {
	dir := t.TempDir()
	s, c := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a", "b")
	if acked, _ := c.counts(); acked != 2 {
		t.Fatalf("with checkpoints inputs are acked once buffered; %d of 2 acked", acked)
	}
	mustOK(t, s.PreCommit(1))
	mustLines(t, dir)
	if _, err := os.Stat(filepath.Join(dir, ".out-0-1."+s.token+".pending")); err != nil {
		t.Fatalf("the pre-committed epoch has no pending file: %v", err)
	}
	mustOK(t, s.Commit(1))
	mustLines(t, dir, "a", "b")
	write(s, 3, "c")
	mustOK(t, s.PreCommit(2))
	mustOK(t, s.Commit(2))
	mustLines(t, dir, "a", "b", "c")
	want := []string{"out-0-00000000000000000001.part", "out-0-00000000000000000002.part"}
	if got := files(t, dir); !slices.Equal(got, want) {
		t.Fatalf("directory holds %q, want %q", got, want)
	}
}

func TestFileRecoverCommitsPreCommittedAndDropsLaterEpochs(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	snap := checkpoint(t, s, 1) // checkpoint 1 completes, but the crash comes before Commit
	write(s, 2, "b")
	checkpoint(t, s, 2) // checkpoint 2 never completes
	// An epoch in progress that reached the disk before the crash.
	write(s, 3, "c")
	mustOK(t, s.flush())
	// Another task's files are not this task's business.
	other := ".out-1-2.0123abcd.pending"
	mustOK(t, os.WriteFile(filepath.Join(dir, other), []byte("x\n"), 0o644))

	// The task restarts from checkpoint 1.
	s2 := restart(t, dir, 0, snap, 1)
	mustLines(t, dir, "a")
	want := []string{other, "out-0-00000000000000000001.part"}
	if got := files(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after Recover(1) the directory holds %q, want %q", got, want)
	}
	write(s2, 2, "b again")
	mustOK(t, s2.PreCommit(2))
	mustOK(t, s2.Commit(2))
	mustLines(t, dir, "a", "b again")
}

// TestFileIgnoresAReplacedInstance runs two instances of one task at once,
// as when a worker paused past its lease wakes up while its successor runs
// the task: the old instance goes on writing the epochs its successor
// writes, and even pre-commits one, but only what the successor's
// checkpoints cover is committed, and a later restart clears the rest.
func TestFileIgnoresAReplacedInstance(t *testing.T) {
	dir := t.TempDir()
	old, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, old.Recover(0))
	write(old, 1, "a")
	snap1 := checkpoint(t, old, 1)
	mustOK(t, old.Commit(1))
	write(old, 2, "b")
	checkpoint(t, old, 2) // paused here: checkpoint 2 never completes

	// The successor restarts from checkpoint 1 and reuses epoch 2: no
	// object of the old attempt reached the store.
	next := restart(t, dir, 0, snap1, 1)
	write(next, 10, "b again")
	checkpoint(t, next, 2)
	mustOK(t, next.Commit(2))
	write(next, 11, "c")

	// The old instance wakes up: it writes its epoch 3, which the
	// successor is writing too. (The runtime does not let it commit: a
	// commit command names its generation.) Its pending epoch 2 was
	// dropped by the successor's Recover, which committed epoch 2 since.
	write(old, 3, "zombie")
	mustOK(t, old.flush())
	mustOK(t, old.Commit(2))
	mustLines(t, dir, "a", "b again")
	snap3 := checkpoint(t, next, 3)
	mustOK(t, next.Commit(3))
	mustLines(t, dir, "a", "b again", "c")

	// A third instance restarts from checkpoint 3: the old instance's
	// files are dropped, the committed epochs stay.
	third := restart(t, dir, 0, snap3, 3)
	mustLines(t, dir, "a", "b again", "c")
	want := []string{"out-0-00000000000000000001.part", "out-0-00000000000000000002.part", "out-0-00000000000000000003.part"}
	if got := files(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after the restart the directory holds %q, want %q", got, want)
	}
	write(third, 12, "c again")
	checkpoint(t, third, 4)
	mustOK(t, third.Commit(4))
	mustLines(t, dir, "a", "b again", "c", "c again")
}

// TestFileRecoverCommitsWhatTheCheckpointNames restores a checkpoint whose
// pre-committed files were partly committed (the crash came between two
// renames), after an aborted epoch, and a state that does not decode.
func TestFileRecoverCommitsWhatTheCheckpointNames(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	checkpoint(t, s, 1) // aborted: no Commit(1)
	write(s, 2, "b")
	snap := checkpoint(t, s, 2)
	mustOK(t, s.commitFile(1, s.token)) // Commit(2) crashed after its first rename
	s2 := restart(t, dir, 0, snap, 2)
	mustLines(t, dir, "a", "b")
	// Recovering from the same checkpoint again finds both committed.
	restart(t, dir, 0, snap, 2)
	mustLines(t, dir, "a", "b")

	// A named file that is neither pending nor committed is an error.
	write(s2, 3, "c")
	snap3 := checkpoint(t, s2, 3)
	mustOK(t, os.Remove(s2.pendingPath(3)))
	s3, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s3.Restore(snap3))
	if err := s3.Recover(3); err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("Recover with a pre-committed file deleted: %v", err)
	}
	for _, bad := range [][]byte{[]byte("short"), []byte("\x080123abcd\x05"), []byte("\x080123abcd\x01\x02\x03"), []byte("\x08zzzzzzzz\x00")} {
		if err := s3.Restore(bad); err == nil || !strings.Contains(err.Error(), "does not decode") {
			t.Errorf("Restore(%q): %v", bad, err)
		}
	}
}

func TestFileCommitTwiceIsANoOp(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	mustOK(t, s.PreCommit(1))
	mustOK(t, s.Commit(1))
	mustOK(t, s.Commit(1))
	mustLines(t, dir, "a")
	// A restarted task recovering the same epoch finds it committed.
	s2, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s2.Recover(1))
	mustOK(t, s2.Commit(1))
	mustLines(t, dir, "a")
}

func TestFileRecoverOnAnEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("Recover created %q", got)
	}
	mustOK(t, s.Cleanup())
	mustLines(t, dir)
	// With checkpoints Cleanup commits nothing: the run's final checkpoint
	// did, and what came after it belongs to no checkpoint.
	if got := files(t, dir); len(got) != 0 && !slices.Equal(got, []string{".out-0-1.pending"}) {
		t.Fatalf("Cleanup left %q", got)
	}
}

func TestFileEpochsMaySkipButNotGoBack(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	mustOK(t, s.PreCommit(5))
	mustOK(t, s.Commit(5))
	if got := files(t, dir); !slices.Equal(got, []string{"out-0-00000000000000000005.part"}) {
		t.Fatalf("PreCommit(5) after Recover(0) left %q", got)
	}
	if err := s.PreCommit(3); err == nil || !strings.Contains(err.Error(), "epochs only grow") {
		t.Fatalf("PreCommit(3) after 5: %v", err)
	}
	if err := s.Commit(6); err == nil || !strings.Contains(err.Error(), "before PreCommit(6)") {
		t.Fatalf("Commit(6) before PreCommit(6): %v", err)
	}
}

func TestFileRefusesAnotherRunsParts(t *testing.T) {
	dir := t.TempDir()
	mustOK(t, os.WriteFile(filepath.Join(dir, "out-0-00000000000000000003.part"), []byte("old\n"), 0o644))
	s, _ := fileTask(t, dir, 0, time.Second)
	err := s.Recover(1)
	if err == nil || !strings.Contains(err.Error(), "out-0-00000000000000000003.part") || !strings.Contains(err.Error(), "another run") {
		t.Fatalf("Recover(1) with a part of epoch 3 present: %v", err)
	}
	mustOK(t, s.Recover(3)) // the same part is this run's when it starts from epoch 3

	// Without checkpoints, Prepare refuses any part of the name.
	s2 := NewFile(FileConfig{Dir: dir, Name: "out"})().(*File)
	err = s2.Prepare(topology.TaskContext{Component: "sink", Index: 1}, newCollector())
	if err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("Prepare over an earlier run's output: %v", err)
	}
}

func TestFileWithoutCheckpointsAcksOnceWrittenAndCommitsAtCleanup(t *testing.T) {
	dir := t.TempDir()
	s, c := fileTask(t, dir, 1, 0)
	write(s, 1, "a", "b")
	if acked, _ := c.counts(); acked != 0 {
		t.Fatalf("%d inputs acked while their records are only in memory", acked)
	}
	s.Flush()
	if acked, _ := c.counts(); acked != 2 {
		t.Fatalf("%d of 2 inputs acked after Flush", acked)
	}
	s.Execute(&topology.Tuple{Stream: topology.TickStream})
	write(s, 3, "c")
	mustOK(t, s.Cleanup())
	if acked, _ := c.counts(); acked != 3 {
		t.Fatalf("%d of 3 inputs acked after Cleanup", acked)
	}
	mustLines(t, dir, "a", "b", "c")
}

func TestFileRestartWithoutCheckpointsKeepsWhatWasAcked(t *testing.T) {
	dir := t.TempDir()
	s, _ := fileTask(t, dir, 0, 0)
	write(s, 1, "a")
	s.Flush() // acked: it must survive the crash that follows
	write(s, 2, "b")
	// The worker dies: "b" was never acked and is replayed to the new task.
	s.f.Close()

	s2, _ := fileTask(t, dir, 0, 0)
	mustOK(t, s2.Recover(0))
	write(s2, 2, "b")
	mustOK(t, s2.Cleanup())
	mustLines(t, dir, "a", "b")
}

func TestFilePartsReadInEpochThenTaskOrder(t *testing.T) {
	dir := t.TempDir()
	t0, _ := fileTask(t, dir, 0, time.Second)
	t1, _ := fileTask(t, dir, 1, time.Second)
	for _, s := range []*File{t0, t1} {
		mustOK(t, s.Recover(0))
	}
	write(t1, 1, "e1 t1")
	write(t0, 2, "e1 t0")
	for _, s := range []*File{t1, t0} {
		mustOK(t, s.PreCommit(1))
		mustOK(t, s.Commit(1))
	}
	write(t0, 3, "e2 t0")
	write(t1, 4, "e2 t1")
	for _, s := range []*File{t1, t0} {
		mustOK(t, s.PreCommit(2))
		mustOK(t, s.Commit(2))
	}
	mustLines(t, dir, "e1 t0", "e1 t1", "e2 t0", "e2 t1")
}

func TestFileErrorsNameTheFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	s := NewFile(FileConfig{Dir: missing})().(*File)
	err := s.Prepare(topology.TaskContext{Component: "sink"}, newCollector())
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "mkdir -p") {
		t.Fatalf("Prepare with a missing Dir: %v", err)
	}

	// A pending file that cannot be created fails the input, naming it.
	dir := t.TempDir()
	s2, c := fileTask(t, dir, 0, time.Second)
	blocked := s2.pendingPath(1)
	mustOK(t, os.Mkdir(blocked, 0o755))
	write(s2, 7, "a")
	if err := c.anyFailure(); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("writing into a blocked pending file: %v", err)
	}
	if err := s2.PreCommit(1); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Fatalf("PreCommit of an epoch that could not be written: %v", err)
	}
}

func TestFileLostRecordsRefusePreCommitUntilRecover(t *testing.T) {
	dir := t.TempDir()
	s, c := fileTask(t, dir, 0, time.Second)
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	// Records acked into the buffer are lost when the disk refuses them.
	err := s.writeFailed(os.ErrClosed)
	if !strings.Contains(err.Error(), s.pendingPath(1)) || !strings.Contains(err.Error(), "goes back to the previous") {
		t.Fatalf("the error of a lost write: %v", err)
	}
	write(s, 2, "b")
	if c.anyFailure() == nil {
		t.Fatal("an input written after a lost write was acked")
	}
	if err := s.PreCommit(1); err == nil {
		t.Fatal("an epoch that lost acked records was pre-committed")
	}
	mustOK(t, s.Recover(0))
	write(s, 1, "a")
	mustOK(t, s.PreCommit(1))
	mustOK(t, s.Commit(1))
	mustLines(t, dir, "a")
}

func TestParseFile(t *testing.T) {
	for _, tc := range []struct {
		file    string
		ok      bool
		task    int
		epoch   uint64
		pending bool
		token   string
	}{
		{"out-0-00000000000000000001.part", true, 0, 1, false, ""},
		{"out-12-00000000000000000340.part", true, 12, 340, false, ""},
		{".out-3-7.pending", true, 3, 7, true, ""},
		{".out-3-7.0123abcd.pending", true, 3, 7, true, "0123abcd"},
		{".out-3-7.0123ABCD.pending", false, 0, 0, false, ""},         // not a token
		{".out-3-7.0123abc.pending", false, 0, 0, false, ""},          // too short
		{".out-1-2.01234567.pending", true, 1, 2, true, "01234567"},   // not sink "out-1" task 2
		{"out-1-0-00000000000000000001.part", false, 0, 0, false, ""}, // sink "out-1"
		{"out-0-1.part", false, 0, 0, false, ""},                      // epoch not padded
		{"out-0-00000000000000000001.pending", false, 0, 0, false, ""},
		{".out-x-1.pending", false, 0, 0, false, ""},
		{"other-0-00000000000000000001.part", false, 0, 0, false, ""},
		{"out-0-00000000000000000001.part.tmp", false, 0, 0, false, ""},
	} {
		p, ok := parseFile(tc.file, "out")
		if ok != tc.ok || ok && (p.task != tc.task || p.epoch != tc.epoch || p.pending != tc.pending || p.token != tc.token) {
			t.Errorf("parseFile(%q) = %+v, %v; want task %d epoch %d pending %v token %q ok %v", tc.file, p, ok, tc.task, tc.epoch, tc.pending, tc.token, tc.ok)
		}
	}
}

// TestFileTwoWritersWithoutCheckpointsInterleaveWholeRecords appends to one
// pending file from two instances of a task, as when a worker paused past
// its lease wakes up while its successor appends to the file it left
// (without checkpoints the file has no token): each write ends at the end
// of a record, so the file holds whole records of either, however their
// writes interleave.
func TestFileTwoWritersWithoutCheckpointsInterleaveWholeRecords(t *testing.T) {
	dir := t.TempDir()
	old, _ := fileTask(t, dir, 0, 0)
	next, _ := fileTask(t, dir, 0, 0)
	mustOK(t, next.Recover(0))
	pad := strings.Repeat("x", 999) // records that do not divide the buffer
	want := map[string]bool{}
	for i := range 300 {
		for _, w := range []struct {
			s    *File
			name string
		}{{old, "old"}, {next, "next"}} {
			line := fmt.Sprintf("%s %d %s", w.name, i, pad)
			want[line] = true
			w.s.Execute(tuple(uint64(i), line))
			if i%100 == 99 {
				mustOK(t, w.s.flush())
			}
		}
	}
	mustOK(t, old.flush())
	mustOK(t, next.flush())
	b, err := os.ReadFile(filepath.Join(dir, ".out-0-1.pending"))
	mustOK(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines {
		if !want[l] {
			t.Fatalf("the file holds a line that neither wrote: %.60q...", l)
		}
		delete(want, l)
	}
	if len(want) > 0 {
		t.Fatalf("%d records missing", len(want))
	}
}
