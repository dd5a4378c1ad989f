package sources

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/internal/strbox"
	"github.com/ackflow/ackflow/topology"
)

// FileConfig says which file a File spout reads and how.
type FileConfig struct {
	// Path is the text file to read. With FS set it is a path in FS
	// (slash-separated, unrooted, as io/fs wants).
	Path string
	// FS, if set, is the file system Path is opened in: an embed.FS for a
	// bundled input, os.DirFS, a test's file system. Nil opens Path on the
	// operating system's file system. Its files must implement io.ReaderAt
	// (os and embed files do), because each task reads its own byte range.
	FS fs.FS
	// Stream is the stream the lines are emitted on (default
	// topology.DefaultStream). Its one field is the line.
	Stream string
	// MaxLine caps a record's size (default 1 MiB): a longer line is
	// emitted in pieces of MaxLine bytes, so that one record never grows
	// without bound. The line's terminator does not count. A word that
	// straddles a cut arrives as two.
	MaxLine int
	// LinesPerSec paces the component, all tasks together; 0 or +Inf reads
	// as fast as flow control allows. Benchmarks use it to measure latency
	// at a given load.
	LinesPerSec float64
	// Read, if set, counts the bytes the component's tasks have read, for a
	// progress bar. A task that seeks back reads those bytes again and
	// counts them again.
	Read *atomic.Int64
}

var _ topology.Positioned = (*File)(nil)

// DefaultMaxLine is FileConfig.MaxLine's default.
const DefaultMaxLine = 1 << 20

func (c *FileConfig) setDefaults() {
	if c.Stream == "" {
		c.Stream = topology.DefaultStream
	}
	if c.MaxLine == 0 {
		c.MaxLine = DefaultMaxLine
	}
	if math.IsInf(c.LinesPerSec, 1) {
		c.LinesPerSec = 0
	}
}

// Validate says what is wrong with c, if anything. Open calls it; call it
// earlier to refuse a bad configuration before a run starts.
func (c FileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("sources: FileConfig.Path is empty; give the text file to read")
	}
	if c.MaxLine < 0 {
		return fmt.Errorf("sources: FileConfig.MaxLine is %d; give a positive size in bytes, or 0 for %d", c.MaxLine, DefaultMaxLine)
	}
	if math.IsNaN(c.LinesPerSec) || c.LinesPerSec < 0 {
		return fmt.Errorf("sources: lines per second %v: use a positive rate, or 0 (or +Inf) for no limit", c.LinesPerSec)
	}
	return nil
}

// File emits the lines of a text file, one record per line, without the
// line's "\n" or "\r\n". A record's message ID is the byte offset of its
// line (of its piece, for a line longer than MaxLine), so a replay or a
// seek reproduces the same IDs.
//
// Task i of p reads the lines that start in bytes [i*size/p, (i+1)*size/p)
// of the file: the tasks split the file without talking to each other, and
// each line is read by exactly one of them. The size is taken when the task
// opens the file; what is appended later is not read.
//
// Its position (topology.Positioned) is the byte offset of the next line
// to read.
type File struct {
	cfg FileConfig
	out topology.SpoutCollector

	f           fs.File
	at          io.ReaderAt
	r           *bufio.Reader
	piece       []byte
	index, of   int
	first, pos  int64 // the task owns the lines that start in [first, limit)
	limit, size int64

	rate    float64 // lines per second for this task; 0: unpaced
	started time.Time
	lines   int64

	vals topology.Values // slab the lines' one-value Values are carved from
}

// valsSlab is how many lines' Values one allocation holds: an allocation
// of 16 bytes per line was a sixth of the objects word count allocated.
// A slab lives as long as the last of its lines' records, 4 KiB at most
// for a line that is kept.
const valsSlab = 256

// NewFile returns a File spout. Give the builder a factory that calls it:
//
//	b.Spout("lines", func() topology.Spout { return sources.NewFile(cfg) }, 4).Outputs("line")
func NewFile(cfg FileConfig) *File { return &File{cfg: cfg} }

// Open opens the file and moves to the first line the task owns.
func (s *File) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.cfg.setDefaults()
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if err := s.openFile(); err != nil {
		return err
	}
	s.out = out
	s.index, s.of = tc.Index, max(tc.Parallelism, 1)
	s.rate = s.cfg.LinesPerSec / float64(s.of)
	var err error
	if s.first, err = nextLineStart(s.at, share(s.size, s.index, s.of), s.size); err != nil {
		return s.readErr(err)
	}
	if s.limit, err = nextLineStart(s.at, share(s.size, s.index+1, s.of), s.size); err != nil {
		return s.readErr(err)
	}
	s.moveTo(s.first)
	return nil
}

func (s *File) openFile() error {
	var err error
	if s.cfg.FS != nil {
		s.f, err = s.cfg.FS.Open(s.cfg.Path)
	} else {
		s.f, err = os.Open(s.cfg.Path)
	}
	if err != nil {
		return fmt.Errorf("sources: cannot open the input file: %w; check FileConfig.Path", err)
	}
	st, err := s.f.Stat()
	if err != nil {
		return s.readErr(err)
	}
	if st.IsDir() {
		return fmt.Errorf("sources: %s is a directory; give a text file", s.cfg.Path)
	}
	at, ok := s.f.(io.ReaderAt)
	if !ok {
		return fmt.Errorf("sources: %s cannot be read at an offset (its fs.File has no ReadAt); use a file system whose files implement io.ReaderAt, such as os.DirFS or embed.FS", s.cfg.Path)
	}
	s.at, s.size = at, st.Size()
	return nil
}

func (s *File) readErr(err error) error {
	return fmt.Errorf("sources: reading %s: %w", s.cfg.Path, err)
}

// share is size*i/p without overflowing for files larger than 2^63/p bytes.
func share(size int64, i, p int) int64 {
	hi, lo := bits.Mul64(uint64(size), uint64(i))
	q, _ := bits.Div64(hi, lo, uint64(p)) // i <= p, so q <= size: no overflow
	return int64(q)
}

// moveTo makes off the next byte to read. The reader stops at limit, so a
// task never reads ahead into the next task's lines.
func (s *File) moveTo(off int64) {
	s.pos = off
	sec := io.NewSectionReader(s.at, off, s.limit-off)
	if s.r == nil {
		s.r = bufio.NewReaderSize(sec, 64<<10)
		return
	}
	s.r.Reset(sec)
}

// Next emits up to 256 lines, fewer when paced.
func (s *File) Next(context.Context) error {
	for range s.budget() {
		if s.pos >= s.limit {
			return topology.ErrExhausted
		}
		piece, err := s.readPiece()
		if len(piece) > 0 {
			s.emit(piece)
		}
		if errors.Is(err, io.EOF) && s.pos < s.limit {
			return fmt.Errorf("sources: %s ended at byte %d, before byte %d: the file shrank while being read; give a file that does not change during the run", s.cfg.Path, s.pos, s.limit)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return s.readErr(err)
		}
	}
	return nil
}

// budget is how many records this Next may emit: 256, or fewer when paced.
func (s *File) budget() int {
	const perNext = 256
	if s.rate == 0 {
		return perNext
	}
	if s.started.IsZero() {
		s.started = time.Now()
	}
	// In floating point: with a huge rate, an integer conversion here
	// overflowed into a negative count, which stalled the spout.
	due := time.Since(s.started).Seconds()*s.rate + 1 - float64(s.lines)
	return int(max(0, min(perNext, due)))
}

func (s *File) emit(piece []byte) {
	off := s.pos
	s.pos += int64(len(piece))
	s.lines++
	if s.cfg.Read != nil {
		s.cfg.Read.Add(int64(len(piece)))
	}
	// A refused record is dead-lettered by the runtime; the file moves on.
	if len(s.vals) == 0 {
		s.vals = make(topology.Values, valsSlab)
	}
	v := s.vals[:1:1] // capped: an append by anyone else reallocates
	s.vals = s.vals[1:]
	v[0] = strbox.Copy(lineBytes(piece))
	_ = s.out.EmitTo(s.cfg.Stream, topology.MsgID{Offset: off}, v)
}

// readPiece reads the next record's bytes: a line with its terminator, or
// the next MaxLine bytes of a longer line. It returns io.EOF at the end of
// the task's lines, with the last line if it has no terminator.
func (s *File) readPiece() ([]byte, error) {
	s.piece = s.piece[:0]
	for len(s.piece) < s.cfg.MaxLine {
		if s.r.Buffered() == 0 {
			if _, err := s.r.Peek(1); err != nil {
				return s.piece, err
			}
		}
		buf, _ := s.r.Peek(min(s.r.Buffered(), s.cfg.MaxLine-len(s.piece)))
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[:i+1]
		}
		s.piece = append(s.piece, buf...)
		s.r.Discard(len(buf))
		if buf[len(buf)-1] == '\n' {
			return s.piece, nil
		}
	}
	// A line exactly MaxLine long takes its terminator along rather than
	// leave it to become an empty record of its own.
	next, _ := s.r.Peek(2)
	if n := terminatorLen(next); n > 0 {
		s.piece = append(s.piece, next[:n]...)
		s.r.Discard(n)
	}
	return s.piece, nil
}

// terminatorLen is the length of the line terminator b starts with: 1 for
// "\n", 2 for "\r\n", 0 for none.
func terminatorLen(b []byte) int {
	switch {
	case len(b) > 0 && b[0] == '\n':
		return 1
	case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
		return 2
	}
	return 0
}

// lineBytes is a piece without its "\n" or "\r\n". The spout emits it
// as a string value with header and bytes in one allocation (strbox.Copy).
func lineBytes(piece []byte) []byte {
	if n := len(piece); n > 0 && piece[n-1] == '\n' {
		piece = piece[:n-1]
		if n := len(piece); n > 0 && piece[n-1] == '\r' {
			piece = piece[:n-1]
		}
	}
	return piece
}

// Position is the byte offset of the next line (or piece of a long line)
// to read, as a uvarint.
func (s *File) Position() ([]byte, error) { return encodePosition(uint64(s.pos)), nil }

// Seek moves to a position Position returned.
func (s *File) Seek(position []byte) error {
	off, err := decodePosition(position, "byte offset", maxOffset)
	if err != nil {
		return err
	}
	if err := s.checkOffset(int64(off)); err != nil {
		return err
	}
	s.moveTo(int64(off))
	return nil
}

// checkOffset refuses an offset that Position could not have returned for
// this task: outside the lines it owns, or inside a line where no piece of
// it starts. Reading from there would emit records with message IDs that
// no earlier run used, which downstream dedup could not recognise, or
// lines that another task emits too.
func (s *File) checkOffset(off int64) error {
	if off < s.first || off > s.limit {
		return fmt.Errorf("sources: file position %d is outside the lines task %d of %d owns (those starting in bytes %d to %d of %s); was the checkpoint taken with another parallelism or another file?", off, s.index, s.of, s.first, s.limit, s.cfg.Path)
	}
	if off == s.limit {
		return nil // all read
	}
	start, err := lineStart(s.at, off)
	if err != nil {
		return s.readErr(err)
	}
	if off == start {
		return nil
	}
	var next [2]byte
	n, err := s.at.ReadAt(next[:], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return s.readErr(err)
	}
	if (off-start)%int64(s.cfg.MaxLine) != 0 || terminatorLen(next[:n]) > 0 {
		return fmt.Errorf("sources: file position %d is inside the line at byte %d of %s, where no piece of %d bytes starts; was the checkpoint taken with another file or another MaxLine?", off, start, s.cfg.Path, s.cfg.MaxLine)
	}
	return nil
}

// nextLineStart returns the first offset at or after off where a line
// starts (size if none does).
func nextLineStart(r io.ReaderAt, off, size int64) (int64, error) {
	if off <= 0 {
		return 0, nil
	}
	buf := make([]byte, 64<<10)
	for at := off - 1; at < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-at)], at)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, err
		}
		at += int64(n)
	}
	return size, nil
}

// lineStart returns the start of the line that contains byte off.
func lineStart(r io.ReaderAt, off int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := off; end > 0; {
		at := max(0, end-int64(len(buf)))
		n, err := r.ReadAt(buf[:end-at], at)
		if n < int(end-at) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return at + int64(i) + 1, nil
		}
		end = at
	}
	return 0, nil
}

// Ack does nothing: a file needs no commit.
func (s *File) Ack(topology.MsgID) {}

// Fail does nothing: the runtime replays the line it kept.
func (s *File) Fail(topology.MsgID) {}

// Close closes the file.
func (s *File) Close() error {
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}
