package sinks

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ackflow/ackflow/topology"
)

// FileConfig configures a File sink.
type FileConfig struct {
	// Dir is the output directory. It must exist: the sink does not create
	// it, so that a typo fails the run instead of hiding its output.
	Dir string
	// Name prefixes the files (default: the component's name).
	Name string
	// Format renders one input (default TabSeparated).
	Format func(*topology.Tuple) ([]byte, error)
}

// Validate reports a config that cannot work, with what to do.
func (c FileConfig) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("sinks: FileConfig.Dir is empty; name an existing output directory")
	case strings.ContainsAny(c.Name, `/\`) || c.Name == "." || c.Name == "..":
		return fmt.Errorf("sinks: FileConfig.Name %q is not a plain file name; it only prefixes files in Dir", c.Name)
	}
	return nil
}

var (
	_ topology.Bolt          = (*File)(nil)
	_ topology.Transactional = (*File)(nil)
	_ topology.Stateful      = (*File)(nil)
	_ topology.Flusher       = (*File)(nil)
)

// NewFile returns a bolt factory for the builder.
func NewFile(cfg FileConfig) func() topology.Bolt {
	return func() topology.Bolt { return &File{cfg: cfg} }
}

const (
	fileBuffer = 64 << 10
	// maxHeld bounds the inputs held for their flush without checkpoints.
	maxHeld = 1024
)

// File is a two-phase-commit file sink (Flink's TwoPhaseCommitSinkFunction)
// and implements topology.Transactional. Task i writes the records of the
// epoch in progress to a hidden pending file,
// .<Name>-<i>-<epoch>.<token>.pending in Dir, where the token is drawn by
// this instance of the task. PreCommit makes it durable, Commit renames it
// to <Name>-<i>-<epoch, 20 digits>.part: a part appears only once its
// checkpoint is complete, so a rolled-back epoch is never seen and its
// replay is written once. ReadParts and Lines read the parts back.
//
// The checkpoint names the pending files it covers (the sink is Stateful:
// its snapshot is its token and the epochs it pre-committed but has not
// committed), and Recover commits exactly those. The files of any other
// instance are dropped: an instance that was rolled back, or one that
// still writes after its worker lost its lease (paused, cut off) and
// whose successor writes the same epochs.
//
// With checkpoints (TaskContext.CheckpointEvery > 0) an input is acked as
// soon as it is in the pending file's buffer: whether it is delivered is
// decided at commit, and an epoch whose file lost records (a full disk)
// refuses PreCommit, so the run goes back to the previous checkpoint.
//
// Without checkpoints nothing rolls back, so an input is acked only once
// its record has reached the file (at Flush, after 1024 inputs, or at a
// tick tuple), and a restarted task appends to the pending file its
// predecessor left. Cleanup commits everything when the run ends. This is
// at-least-once: a task that dies between a write and its ack has its
// input replayed and written again.
type File struct {
	cfg          FileConfig
	out          topology.Collector
	task         int  // index within the component
	checkpointed bool // epochs roll back; acks do not wait for the disk
	prepared     bool
	// token names this instance's pending files (with checkpoints).
	token string
	// restored is what the checkpoint the task restarts from pre-committed,
	// for Recover to commit.
	restored *fileSnapshot

	epoch uint64 // epoch being written
	f     *os.File
	file  counter // f, counting what reached it
	// buf holds whole records for f: it is written in one call when the
	// next record would not fit, so that every write ends at the end of a
	// record. Without checkpoints a restarted task appends to its
	// predecessor's file, and a predecessor that still runs (its worker
	// was paused past its lease) may append too: whole-record writes
	// interleave as whole records, where a buffer cut anywhere would have
	// split one with the other's.
	buf  []byte
	good int64 // length of f at the last flush: whole records only
	// lost is why the epoch in progress misses acked records: it cannot
	// be pre-committed until Recover starts over.
	lost error
	// held are inputs written but not yet acked (without checkpoints).
	held []*topology.Tuple
	// precommitted are epochs awaiting Commit, in order.
	precommitted []uint64
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Prepare checks the directory. Without checkpoints it also refuses to
// start when the directory holds parts of the same name: they are an
// earlier run's, and this run would overwrite or mix with them.
func (s *File) Prepare(tc topology.TaskContext, out topology.Collector) error {
	if s.cfg.Name == "" {
		s.cfg.Name = tc.Component
	}
	if s.cfg.Format == nil {
		s.cfg.Format = TabSeparated
	}
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if err := checkDir(s.cfg.Dir); err != nil {
		return err
	}
	s.out, s.task, s.checkpointed = out, tc.Index, tc.CheckpointEvery > 0
	s.epoch, s.prepared = 1, true
	if s.checkpointed {
		var b [tokenLen / 2]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		s.token = hex.EncodeToString(b[:])
		return nil // Recover decides what the directory's files are
	}
	parts, err := scan(s.cfg.Dir, s.cfg.Name)
	if err != nil {
		return err
	}
	return s.refuseForeign(parts, 0, true)
}

func checkDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sinks: output directory %s does not exist; create it (mkdir -p %s) or fix FileConfig.Dir", dir, dir)
	case err != nil:
		return fmt.Errorf("sinks: output directory %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("sinks: output directory %s is not a directory; fix FileConfig.Dir", dir)
	}
	return nil
}

// refuseForeign refuses committed parts of epochs after epoch: this run
// has not committed them, so another run has, and committing over them
// would destroy its output. anyTask checks every task's parts, not only
// this one's.
func (s *File) refuseForeign(parts []part, epoch uint64, anyTask bool) error {
	for _, p := range parts {
		if !p.pending && p.epoch > epoch && (anyTask || p.task == s.task) {
			return fmt.Errorf("sinks: %s holds %s, a part of epoch %d, but this run has committed nothing after epoch %d: it is another run's output; move it away, or set another Dir or Name", s.cfg.Dir, p.file, p.epoch, epoch)
		}
	}
	return nil
}

// Execute writes in to the pending file. A tick tuple flushes.
func (s *File) Execute(in *topology.Tuple) {
	if in.Stream == topology.TickStream {
		s.Flush()
		return
	}
	rec, err := s.cfg.Format(in)
	if err != nil {
		s.out.FailWith(in, fmt.Errorf("sinks: formatting record %016x for %s: %w", in.ID, s.cfg.Name, err))
		return
	}
	if err := s.write(rec); err != nil {
		s.out.FailWith(in, err)
		return
	}
	if s.checkpointed {
		s.out.Ack(in)
		return
	}
	s.held = append(s.held, in)
	if len(s.held) >= maxHeld {
		s.Flush()
	}
}

// Flush writes the buffer to the file and acks the inputs held for it.
// The runtime calls it when the task is idle (topology.Flusher).
func (s *File) Flush() {
	if len(s.held) > 0 && s.flush() == nil {
		s.ackHeld()
	}
}

func (s *File) write(rec []byte) error {
	if s.lost != nil {
		return s.lost
	}
	if err := s.open(); err != nil {
		return err
	}
	if len(s.buf) > 0 && len(s.buf)+len(rec) > fileBuffer {
		if err := s.flush(); err != nil {
			return err
		}
	}
	s.buf = append(s.buf, rec...)
	return nil
}

// open opens the pending file of the epoch in progress, if it is not open.
// With checkpoints a leftover of that name is from a rolled-back attempt
// and is emptied; without, it is a restarted task's predecessor's, whose
// records were acked, and is appended to.
func (s *File) open() error {
	if s.f != nil {
		return nil
	}
	path := s.pendingPath(s.epoch)
	flag := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if s.checkpointed {
		flag |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return fmt.Errorf("sinks: creating %s: %w; check that %s exists and is writable", path, err, s.cfg.Dir)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("sinks: %s: %w", path, err)
	}
	s.f, s.good = f, st.Size()
	s.file = counter{w: f, n: st.Size()}
	if s.buf == nil {
		s.buf = make([]byte, 0, fileBuffer)
	}
	s.buf = s.buf[:0]
	return nil
}

// flush writes the buffer to the file.
func (s *File) flush() error {
	if s.f == nil {
		return nil
	}
	if len(s.buf) > 0 {
		_, err := s.file.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			return s.writeFailed(err)
		}
	}
	s.good = s.file.n
	return nil
}

// writeFailed handles a write the file refused (a full disk). With
// checkpoints the epoch has lost acked records and must not be
// pre-committed. Without, the records since the last flush are all held,
// not acked: the file is cut back to its last whole record and they are
// failed, so their replay writes them once.
func (s *File) writeFailed(err error) error {
	path := s.pendingPath(s.epoch)
	if s.checkpointed {
		s.lost = fmt.Errorf("sinks: writing %s: %w; epoch %d lost records, so its checkpoint fails and the run goes back to the previous one; free space on that disk", path, err, s.epoch)
		return s.lost
	}
	err = fmt.Errorf("sinks: writing %s: %w; the records not yet written are failed and replayed; free space on that disk", path, err)
	if terr := s.f.Truncate(s.good); terr != nil {
		err = fmt.Errorf("%w (cutting the file back to its last whole record failed too: %v)", err, terr)
	}
	s.file.n = s.good
	s.failHeld(err)
	return err
}

func (s *File) ackHeld() {
	for _, in := range s.held {
		s.out.Ack(in)
	}
	clear(s.held)
	s.held = s.held[:0]
}

func (s *File) failHeld(err error) {
	for _, in := range s.held {
		s.out.FailWith(in, err)
	}
	clear(s.held)
	s.held = s.held[:0]
}

// PreCommit ends the transaction of epoch: the records received since the
// previous PreCommit are flushed and synced to the pending file of epoch
// (an empty one if none came), and the next records go to epoch+1. Epochs
// may skip numbers but not go back.
func (s *File) PreCommit(epoch uint64) error {
	if !s.prepared {
		return errors.New("sinks: File.PreCommit before Prepare")
	}
	if epoch < s.epoch {
		return fmt.Errorf("sinks: %s task %d: PreCommit(%d) while epoch %d is in progress; epochs only grow", s.cfg.Name, s.task, epoch, s.epoch)
	}
	err := s.preCommit(epoch)
	if err != nil && s.checkpointed && s.lost == nil {
		// The file may be incomplete or closed: reopening it would
		// empty it. Only a rollback starts the epoch over.
		s.lost = err
	}
	return err
}

func (s *File) preCommit(epoch uint64) error {
	if s.lost != nil {
		return s.lost
	}
	if err := s.open(); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return err
	}
	s.ackHeld()
	path := s.pendingPath(s.epoch)
	err := s.f.Sync()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.f = nil
	if err != nil {
		return fmt.Errorf("sinks: syncing %s: %w; its records may not be on disk", path, err)
	}
	if epoch != s.epoch {
		if err := os.Rename(path, s.pendingPath(epoch)); err != nil {
			return fmt.Errorf("sinks: renaming %s for epoch %d: %w", path, epoch, err)
		}
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		return err
	}
	s.precommitted = append(s.precommitted, epoch)
	s.epoch = epoch + 1
	return nil
}

// Commit makes the pre-committed epochs up to epoch visible: each pending
// file becomes a part. Committing an epoch again does nothing.
func (s *File) Commit(epoch uint64) error {
	if epoch >= s.epoch {
		return fmt.Errorf("sinks: %s task %d: Commit(%d) before PreCommit(%d); only pre-committed epochs can be committed", s.cfg.Name, s.task, epoch, epoch)
	}
	n := 0
	defer func() { s.precommitted = s.precommitted[n:] }()
	for ; n < len(s.precommitted) && s.precommitted[n] <= epoch; n++ {
		if err := s.commitFile(s.precommitted[n], s.token); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	return syncDir(s.cfg.Dir)
}

// commitFile renames the pending file of epoch written by the instance
// with token to its part. It refuses to replace an existing part: that is
// another run's output. A part without the pending file was committed
// already, by this instance or by a successor's Recover.
func (s *File) commitFile(epoch uint64, token string) error {
	from, to := s.path(pendingName(s.cfg.Name, s.task, epoch, token)), s.path(partName(s.cfg.Name, s.task, epoch))
	if _, err := os.Lstat(to); err == nil {
		if _, err := os.Lstat(from); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sinks: committing %s: %s exists already, another run's output; move it away, or set another Dir or Name", from, to)
	}
	err := os.Rename(from, to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sinks: committing epoch %d: its pre-committed file %s is gone; was it deleted, or does another run write to %s with the name %s?", epoch, from, s.cfg.Dir, s.cfg.Name)
	case err != nil:
		return fmt.Errorf("sinks: committing %s as %s: %w", from, to, err)
	}
	return nil
}

// Recover settles what earlier lives of this task left in the directory,
// for a run that starts from checkpoint epoch (0: none). With checkpoints,
// the pending files the checkpoint names (Restore) were pre-committed for
// it or for an earlier epoch: they are committed. Every other pending file
// of the task is deleted, since the replay writes its records again: a
// rolled-back epoch's, or one a worker that lost its lease went on
// writing. Without checkpoints nothing replays, so pending files up to
// epoch are committed and later ones kept and appended to. The next
// records go to epoch+1.
func (s *File) Recover(epoch uint64) error {
	if !s.prepared {
		return errors.New("sinks: File.Recover before Prepare")
	}
	s.abandon()
	parts, err := scan(s.cfg.Dir, s.cfg.Name)
	if err != nil {
		return err
	}
	if err := s.refuseForeign(parts, epoch, false); err != nil {
		return err
	}
	restored := s.restored.covering(epoch)
	changed := false
	for _, p := range parts {
		if !p.pending || p.task != s.task || (p.epoch > epoch && !s.checkpointed) {
			continue
		}
		if err := s.settlePending(p, epoch, restored); err != nil {
			return err
		}
		changed = true
	}
	// A file the checkpoint names and that is gone was committed by an
	// earlier Recover from the same checkpoint, or by its own instance.
	for _, e := range restored.epochs {
		if err := s.commitFile(e, restored.token); err != nil {
			return err
		}
	}
	if changed || len(restored.epochs) > 0 {
		if err := syncDir(s.cfg.Dir); err != nil {
			return err
		}
	}
	s.epoch, s.precommitted, s.lost, s.restored = epoch+1, nil, nil, nil
	return nil
}

// settlePending commits or deletes a pending file p of this task found by
// Recover(epoch); the files the checkpoint names are left to Recover.
func (s *File) settlePending(p part, epoch uint64, restored fileSnapshot) error {
	switch {
	case p.token != "" && p.token == restored.token && slices.Contains(restored.epochs, p.epoch):
		return nil
	case p.token == "" && p.epoch <= epoch:
		// Without checkpoints every such file is the task's; with them,
		// one without a token is an earlier version's, which committed
		// every pending file up to the checkpoint.
		return s.commitFile(p.epoch, "")
	}
	if err := os.Remove(s.path(p.file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sinks: removing %s, which belongs to a rolled-back epoch or a replaced worker: %w; remove it by hand", s.path(p.file), err)
	}
	return nil
}

// fileSnapshot is a File's checkpointed state: the token of the instance
// that took it and the epochs it had pre-committed and not committed,
// the epoch of the checkpoint itself written as 0 (Snapshot does not know
// it; PreCommit comes next).
type fileSnapshot struct {
	token  string
	epochs []uint64
}

// covering returns the snapshot of checkpoint epoch with its epochs
// numbered: a snapshot restored from it, or none.
func (f *fileSnapshot) covering(epoch uint64) fileSnapshot {
	if f == nil || epoch == 0 {
		return fileSnapshot{}
	}
	out := fileSnapshot{token: f.token}
	for _, e := range f.epochs {
		if e == 0 {
			e = epoch
		}
		if e <= epoch {
			out.epochs = append(out.epochs, e)
		}
	}
	return out
}

// Snapshot names the pending files the checkpoint being taken covers:
// those pre-committed and not yet committed, and the one PreCommit is
// about to seal.
func (s *File) Snapshot() ([]byte, error) {
	if !s.checkpointed {
		return nil, nil
	}
	b := appendString(nil, s.token)
	b = binary.AppendUvarint(b, uint64(len(s.precommitted)+1))
	for _, e := range s.precommitted {
		b = binary.AppendUvarint(b, e)
	}
	return binary.AppendUvarint(b, 0), nil
}

// Restore reads a Snapshot, for Recover.
func (s *File) Restore(snapshot []byte) error {
	if len(snapshot) == 0 {
		return nil
	}
	r := &reader{b: snapshot}
	f := &fileSnapshot{token: r.string()}
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		f.epochs = append(f.epochs, r.uvarint())
	}
	if r.err != nil || len(r.b) > 0 || !isToken(f.token) {
		return fmt.Errorf("sinks: %s task %d: the checkpoint's file sink state (%d bytes) does not decode; the checkpoint is damaged", s.cfg.Name, s.task, len(snapshot))
	}
	s.restored = f
	return nil
}

// abandon drops the file in progress: Recover starts over.
func (s *File) abandon() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	s.failHeld(errors.New("sinks: the file sink recovers from a checkpoint; its unwritten records are replayed"))
}

// Cleanup ends the sink. Without checkpoints (where PreCommit is never
// called) it pre-commits and commits the epoch in progress, so that the run
// produces its output. With checkpoints it commits nothing: the runtime
// ends every run, finished or stopped, with a checkpoint whose commit
// delivered everything up to it, and what came after belongs to no
// checkpoint; a resumed run writes it again, and Recover removes the
// pending file.
func (s *File) Cleanup() error {
	if !s.prepared {
		return nil
	}
	if s.checkpointed {
		s.abandon()
		return nil
	}
	epoch := s.epoch
	if err := s.PreCommit(epoch); err != nil {
		s.abandon()
		return err
	}
	return s.Commit(epoch)
}

func (s *File) path(file string) string { return filepath.Join(s.cfg.Dir, file) }

func (s *File) pendingPath(epoch uint64) string {
	return s.path(pendingName(s.cfg.Name, s.task, epoch, s.token))
}
