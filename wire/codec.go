package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
	"unsafe"

	"github.com/ackflow/ackflow/internal/strbox"
)

// magic is the first byte of every frame. 0xAF is neither printable ASCII
// nor a valid first byte of UTF-8, so JSON or text published to an ackflow
// subject by mistake is refused at the first byte.
const magic = 0xAF

// MaxDepth is how deeply lists and maps, counted together, may nest inside
// one value. The limit keeps decoding a hostile frame from recursing without
// bound and makes encoding a list or map that contains itself an error
// instead of a stack overflow.
const MaxDepth = 8

// Value tags. Booleans get two tags so that they cost one byte.
const (
	tagNil    = 0
	tagFalse  = 1
	tagTrue   = 2
	tagInt    = 3
	tagFloat  = 4
	tagString = 5
	tagBytes  = 6
	tagList   = 7
	tagUint   = 8
	tagMap    = 9
)

// Record flags: which of a record's fields are left out because they are
// the frame's or the previous record's. A word count's record was 42 bytes
// on average, 10 of them its epoch, source task and stream, the same in
// every record of a frame.
const (
	sameEpoch  = 1 << iota // the record's epoch is the frame's
	sameSrc                // its source task is the frame's sender
	sameStream             // its stream is the previous record's
	allFlags   = sameEpoch | sameSrc | sameStream
)

// The fewest bytes an item can take. A count that claims more items than the
// remaining bytes could hold is refused before anything is allocated for it.
const (
	minRecordSize = 8 + 1 + 1 + 1     // ID, flags, two counts
	minAckSize    = 1 + 8 + 8 + 1 + 1 // type, tree, value, task, error length
	minNoticeSize = 1 + 8 + 1 + 1     // type, tree, task, error length
	minLinkSize   = 1 + 1 + 1 + 1     // type, epoch, sequence, count
	anchorSize    = 8 + 8
	minEntrySize  = 1 + 1 // map entry: key length, value tag
)

var (
	// ErrShort means the data ends before the frame does: a truncated
	// message, or a count or length that claims more than the message holds.
	ErrShort = errors.New("wire: frame is truncated")
	// ErrMagic means the data is not an ackflow frame at all.
	ErrMagic = errors.New("wire: not an ackflow frame (bad magic byte)")
	// ErrVersion means the frame was written by a build that speaks another
	// version of the format; the wrapped message names both versions.
	ErrVersion = errors.New("wire: unsupported frame version")
	// ErrCorrupt means the frame breaks the format: an unknown kind, tag or
	// type, an out-of-range number, lists and maps nested too deeply, a map
	// key given twice, an error text longer than MaxErrLen, a NACK for no
	// frames, or bytes left over after the last item.
	ErrCorrupt = errors.New("wire: corrupt frame")
)

// String returns the kind's name for logs and errors.
func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindAck:
		return "ack"
	case KindNotice:
		return "notice"
	case KindLink:
		return "link"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// String returns the message type's name for logs and errors.
func (t AckType) String() string {
	switch t {
	case AckInit:
		return "INIT"
	case AckAck:
		return "ACK"
	case AckFail:
		return "FAIL"
	case AckReset:
		return "RESET"
	case AckAbandon:
		return "ABANDON"
	}
	return fmt.Sprintf("AckType(%d)", uint8(t))
}

// String returns the verdict's name for logs and errors.
func (t NoticeType) String() string {
	switch t {
	case NoticeComplete:
		return "complete"
	case NoticeFailed:
		return "failed"
	case NoticeReset:
		return "reset"
	}
	return fmt.Sprintf("NoticeType(%d)", uint8(t))
}

// String returns the message type's name for logs and errors.
func (t LinkType) String() string {
	switch t {
	case LinkHWM:
		return "HWM"
	case LinkNack:
		return "NACK"
	case LinkStart:
		return "start"
	}
	return fmt.Sprintf("LinkType(%d)", uint8(t))
}

func (t AckType) valid() bool    { return t >= AckInit && t <= AckAbandon }
func (t NoticeType) valid() bool { return t >= NoticeComplete && t <= NoticeReset }
func (t LinkType) valid() bool   { return t >= LinkHWM && t <= LinkStart }

// AppendFrame appends the encoding of f to dst and returns the extended
// buffer. Only the slice that matches f.Kind is encoded. Passing a reused
// buffer with enough capacity makes encoding allocation-free, except that a
// map value with more than 16 keys allocates to sort them.
//
// Values may be string, []byte, bool, nil, int64, uint64, float64, []any or
// map[string]any, with lists and maps holding the same types; int and int32
// are widened to int64 and float32 to float64, so they decode as int64 and
// float64, and a nil []byte, []any or map[string]any decodes as an empty one.
// Map keys are written in sorted order, so a map always encodes to the same
// bytes. An Err longer than MaxErrLen is cut to MaxErrLen bytes or a little
// less, so as not to split a UTF-8 sequence.
//
// Any other value type, lists and maps nested deeper than MaxDepth, an
// unknown kind or message type, or a NACK for 0 frames is an error; dst is
// then returned with its original length, so the caller's buffer holds no
// partial frame.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	start := len(dst)
	dst = append(dst, magic, Version, byte(f.Kind))
	dst = binary.AppendVarint(dst, int64(f.Src))
	dst = binary.AppendUvarint(dst, f.Epoch)
	dst = binary.AppendUvarint(dst, f.Seq)
	dst = binary.AppendUvarint(dst, f.DstEpoch)
	var err error
	switch f.Kind {
	case KindData:
		dst, err = appendRecords(dst, f)
	case KindAck:
		dst, err = appendAcks(dst, f.Acks)
	case KindNotice:
		dst, err = appendNotices(dst, f.Notices)
	case KindLink:
		dst, err = appendLinks(dst, f.Links)
	default:
		err = fmt.Errorf("wire: frame has unknown kind %d; use KindData, KindAck, KindNotice or KindLink", uint8(f.Kind))
	}
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

func appendRecords(dst []byte, f *Frame) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(f.Records)))
	for i := range f.Records {
		var err error
		if dst, err = appendRecord(dst, f, i); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func appendAcks(dst []byte, acks []AckMsg) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(acks)))
	for i := range acks {
		a := &acks[i]
		if !a.Type.valid() {
			return dst, fmt.Errorf("wire: ack %d has unknown type %d; use AckInit, AckAck, AckFail, AckReset or AckAbandon", i, uint8(a.Type))
		}
		dst = append(dst, byte(a.Type))
		dst = binary.LittleEndian.AppendUint64(dst, a.Tree)
		dst = binary.LittleEndian.AppendUint64(dst, a.Val)
		dst = binary.AppendVarint(dst, int64(a.Task))
		dst = appendErr(dst, a.Err)
	}
	return dst, nil
}

func appendNotices(dst []byte, notices []Notice) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(notices)))
	for i := range notices {
		n := &notices[i]
		if !n.Type.valid() {
			return dst, fmt.Errorf("wire: notice %d has unknown type %d; use NoticeComplete, NoticeFailed or NoticeReset", i, uint8(n.Type))
		}
		dst = append(dst, byte(n.Type))
		dst = binary.LittleEndian.AppendUint64(dst, n.Tree)
		dst = binary.AppendVarint(dst, int64(n.Task))
		dst = appendErr(dst, n.Err)
	}
	return dst, nil
}

func appendLinks(dst []byte, links []LinkMsg) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(links)))
	for i := range links {
		l := &links[i]
		if !l.Type.valid() {
			return dst, fmt.Errorf("wire: link %d has unknown type %d; use LinkHWM, LinkNack or LinkStart", i, uint8(l.Type))
		}
		if l.Type == LinkNack && l.Count == 0 {
			return dst, fmt.Errorf("wire: link %d is a NACK for 0 frames; set Count to the number of frames to resend, or send nothing", i)
		}
		dst = append(dst, byte(l.Type))
		dst = binary.AppendUvarint(dst, l.Epoch)
		dst = binary.AppendUvarint(dst, l.Seq)
		dst = binary.AppendUvarint(dst, l.Count)
	}
	return dst, nil
}

// appendErr appends an Err field, cut to MaxErrLen bytes.
// Most acks and notices carry no error, so that case inlines.
func appendErr(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, 0)
	}
	return appendErrText(dst, s)
}

func appendErrText(dst []byte, s string) []byte {
	s = cutErr(s)
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// cutErr returns s cut to at most MaxErrLen bytes. It cuts before a UTF-8
// sequence that crosses the limit, not through it, so that a valid reason
// stays valid text.
func cutErr(s string) string {
	if len(s) <= MaxErrLen {
		return s
	}
	n := MaxErrLen
	// s[n] is the first byte cut off; while it continues a sequence, that
	// sequence started at most UTFMax-1 bytes earlier.
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n]
}

// appendRecord appends record ri of f. Its epoch, source task and stream
// are left out when they are the frame's epoch and sender and the previous
// record's stream, as they almost always are (flags).
func appendRecord(dst []byte, f *Frame, ri int) ([]byte, error) {
	r := &f.Records[ri]
	dst = binary.LittleEndian.AppendUint64(dst, r.ID)
	var flags byte
	if r.Epoch == f.Epoch {
		flags |= sameEpoch
	}
	if r.SrcTask == f.Src {
		flags |= sameSrc
	}
	if ri > 0 && r.Stream == f.Records[ri-1].Stream {
		flags |= sameStream
	}
	dst = append(dst, flags)
	if flags&sameEpoch == 0 {
		dst = binary.AppendUvarint(dst, r.Epoch)
	}
	if flags&sameSrc == 0 {
		dst = binary.AppendVarint(dst, int64(r.SrcTask))
	}
	if flags&sameStream == 0 {
		dst = binary.AppendUvarint(dst, uint64(len(r.Stream)))
		dst = append(dst, r.Stream...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Anchors)))
	for _, a := range r.Anchors {
		dst = binary.LittleEndian.AppendUint64(dst, a.Tree)
		dst = binary.LittleEndian.AppendUint64(dst, a.Val)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Values)))
	for vi, v := range r.Values {
		var err error
		if dst, err = appendValue(dst, v, 0, ri, vi); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendValue encodes v, a value inside depth lists and maps; ri and vi name
// the record and top-level value for the error message.
func appendValue(dst []byte, v any, depth, ri, vi int) ([]byte, error) {
	switch v := v.(type) {
	case string:
		dst = append(dst, tagString)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		return append(dst, v...), nil
	case int64:
		return binary.AppendVarint(append(dst, tagInt), v), nil
	case int:
		return binary.AppendVarint(append(dst, tagInt), int64(v)), nil
	case int32:
		return binary.AppendVarint(append(dst, tagInt), int64(v)), nil
	case uint64:
		return binary.AppendUvarint(append(dst, tagUint), v), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(dst, tagFloat), math.Float64bits(v)), nil
	case float32:
		return binary.LittleEndian.AppendUint64(append(dst, tagFloat), math.Float64bits(float64(v))), nil
	case bool:
		if v {
			return append(dst, tagTrue), nil
		}
		return append(dst, tagFalse), nil
	case nil:
		return append(dst, tagNil), nil
	case []byte:
		dst = append(dst, tagBytes)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		return append(dst, v...), nil
	case []any:
		if depth >= MaxDepth {
			return dst, tooDeep(ri, vi)
		}
		dst = append(dst, tagList)
		dst = binary.AppendUvarint(dst, uint64(len(v)))
		for _, e := range v {
			var err error
			if dst, err = appendValue(dst, e, depth+1, ri, vi); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case map[string]any:
		if depth >= MaxDepth {
			return dst, tooDeep(ri, vi)
		}
		return appendMap(dst, v, depth, ri, vi)
	}
	return dst, fmt.Errorf("wire: value %d of record %d has unsupported type %T; use string, []byte, bool, nil, int64, uint64, float64, []any or map[string]any", vi, ri, v)
}

// appendMap encodes m, a map inside depth lists and maps, with its keys in
// sorted order so that the same map always encodes to the same bytes,
// whatever order Go iterates it in.
func appendMap(dst []byte, m map[string]any, depth, ri, vi int) ([]byte, error) {
	// The keys of a small map are sorted on the stack; appendMap is apart
	// from appendValue so that only maps pay for the array.
	var buf [16]string
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, tagMap)
	dst = binary.AppendUvarint(dst, uint64(len(keys)))
	for _, k := range keys {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		var err error
		if dst, err = appendValue(dst, m[k], depth+1, ri, vi); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func tooDeep(ri, vi int) error {
	return fmt.Errorf("wire: value %d of record %d nests lists and maps more than %d deep; flatten it", vi, ri, MaxDepth)
}

// PeekHeader returns the kind and item count of a frame without decoding
// its items, for routing and metrics. It checks the header as DecodeFrame
// does, including that the count could fit in the data, but a nil error does
// not promise that the items decode.
func PeekHeader(data []byte) (Kind, int, error) {
	d := decoder{data: data, item: -1, val: -1}
	return d.header()
}

// DecodeFrame decodes data into f, replacing what f held. It never panics,
// and it refuses (with an error wrapping ErrShort, ErrMagic, ErrVersion or
// ErrCorrupt) anything but exactly one well-formed frame of this version.
// On error f is left empty, with its capacity kept.
//
// Strings and []byte values are copies: data may be reused as soon as
// DecodeFrame returns. To save allocations DecodeFrame reuses f's arrays,
// including each record's Anchors and Values, so a caller that keeps a
// Record past the next DecodeFrame into the same Frame must copy those two
// slices first, or decode into a new Frame each time; the strings, byte
// slices and lists inside values are never reused. For the same reason f
// must be a zero Frame or one that only DecodeFrame has filled: records of a
// hand-built Frame may share arrays, which decoding would overwrite. In a
// new Frame, a record without anchors or values has nil slices.
func DecodeFrame(data []byte, f *Frame) error {
	return decodeFrame(data, f, false)
}

// DecodeFrameInPlace is DecodeFrame for data that is never changed again
// (a NATS message's payload, which the client gives its handler): string
// values, at any depth, refer to data's bytes instead of copies, so that a
// frame's strings cost one allocation of headers instead of one each. A
// string value kept keeps all of data alive. Map keys, []byte values and
// the errors of acks and notices are copied as DecodeFrame copies them.
func DecodeFrameInPlace(data []byte, f *Frame) error {
	return decodeFrame(data, f, true)
}

func decodeFrame(data []byte, f *Frame, inPlace bool) error {
	d := decoder{data: data, item: -1, val: -1, inPlace: inPlace}
	kind, n, err := d.header()
	if err != nil {
		f.clear()
		return err
	}
	f.Kind, f.Src, f.Epoch, f.Seq, f.DstEpoch = kind, d.src, d.epoch, d.seq, d.dstEpoch
	// Empty the slices of the other kinds; records handles f.Records itself.
	if kind != KindData {
		f.dropRecords()
	}
	f.Acks, f.Notices, f.Links = f.Acks[:0], f.Notices[:0], f.Links[:0]
	switch kind {
	case KindData:
		d.records(f, n)
	case KindAck:
		d.acks(f, n)
	case KindNotice:
		d.notices(f, n)
	case KindLink:
		d.links(f, n)
	}
	err = d.error()
	if err == nil && d.off != len(data) {
		err = fmt.Errorf("%w: %d bytes follow the last of %d %s items; refusing a frame that may have been spliced", ErrCorrupt, len(data)-d.off, n, kind)
	}
	if err != nil {
		f.clear()
	}
	return err
}

func (f *Frame) clear() {
	f.Kind, f.Src, f.Epoch, f.Seq, f.DstEpoch = 0, 0, 0, 0, 0
	f.dropRecords()
	f.Acks, f.Notices, f.Links = f.Acks[:0], f.Notices[:0], f.Links[:0]
}

// dropRecords empties f.Records but keeps the arrays for reuse. It clears
// the values, which would otherwise stay reachable until a data frame long
// enough to overwrite them arrives.
func (f *Frame) dropRecords() {
	for i := range f.Records {
		r := &f.Records[i]
		clear(r.Values)
		r.Values = r.Values[:0]
	}
	f.Records = f.Records[:0]
}

// decoder reads one frame. It lives on DecodeFrame's stack.
//
// Its read methods do not return errors: they note the first failure in
// the fail fields and return a zero value. That keeps the methods small
// enough to inline, and callers check failed once per item and before they
// act on a count, not after every field.
type decoder struct {
	data []byte
	off  int
	kind Kind

	src                  int32
	epoch, seq, dstEpoch uint64

	failed    failKind // zero until a read fails
	failField string   // what was being read
	failN     uint64   // the count, length or number that was refused
	failLimit int      // the largest count or length the bytes left allow
	failAt    int      // offset of the failed read
	err       error    // the error when failed is failOther

	item int // item being decoded, for errors; -1 in the header
	val  int // top-level value being decoded, for errors; -1 outside values

	// streams holds this frame's recent stream names so that a batch whose
	// records share a stream allocates its name once.
	streams [4]string
	nstream int
	stream  string // the previous record's

	// Slabs that records without enough capacity of their own are carved
	// from, so that decoding into a new Frame allocates per frame, not per
	// record.
	anchors []Anchor
	values  []any

	// inPlace: string values share data's bytes (DecodeFrameInPlace),
	// their headers carved from strs.
	inPlace bool
	strs    []string
}

func (d *decoder) header() (Kind, int, error) {
	if len(d.data) == 0 {
		return 0, 0, fmt.Errorf("%w: the data is empty", ErrShort)
	}
	if d.data[0] != magic {
		return 0, 0, fmt.Errorf("%w: first byte is %#02x, want %#02x", ErrMagic, d.data[0], magic)
	}
	if len(d.data) < 2 {
		return 0, 0, fmt.Errorf("%w: the data ends before the version byte", ErrShort)
	}
	if v := d.data[1]; v != Version {
		return 0, 0, fmt.Errorf("%w: frame is version %d, this build speaks version %d; run the same ackflow build on every worker", ErrVersion, v, Version)
	}
	if len(d.data) < 3 {
		return 0, 0, fmt.Errorf("%w: the data ends before the kind byte", ErrShort)
	}
	d.kind = Kind(d.data[2])
	d.off = 3
	var size int
	switch d.kind {
	case KindData:
		size = minRecordSize
	case KindAck:
		size = minAckSize
	case KindNotice:
		size = minNoticeSize
	case KindLink:
		size = minLinkSize
	default:
		return 0, 0, fmt.Errorf("%w: unknown frame kind %d", ErrCorrupt, d.data[2])
	}
	d.src = d.int32("sender task")
	d.epoch = d.uvarint("epoch")
	d.seq = d.uvarint("sequence")
	d.dstEpoch = d.uvarint("destination epoch")
	n := d.count("item count", size)
	if err := d.error(); err != nil {
		return 0, 0, err
	}
	return d.kind, n, nil
}

func (d *decoder) records(f *Frame, n int) {
	old := len(f.Records)
	// Reslicing to capacity brings back records of earlier, longer frames
	// whose Anchors and Values arrays can be reused.
	recs := f.Records[:cap(f.Records)]
	if len(recs) < n {
		recs = append(recs, make([]Record, n-len(recs))...)
	}
	// Records this frame does not use would otherwise keep the previous
	// frame's values reachable until a longer frame arrives.
	for i := n; i < old; i++ {
		r := &recs[i]
		clear(r.Values)
		r.Values = r.Values[:0]
	}
	f.Records = recs[:n]
	for i := range f.Records {
		d.item = i
		d.record(&f.Records[i], n-i)
		if d.failed != 0 {
			return
		}
	}
}

// record decodes one record into r; left counts it and the records after
// it, to size slabs.
func (d *decoder) record(r *Record, left int) {
	r.ID = d.u64("ID")
	flags := d.byte("record flags")
	switch {
	case d.failed != 0:
		return
	case flags&^allFlags != 0:
		d.corrupt("unknown record flags %#02x", flags)
		return
	case flags&sameStream != 0 && d.item == 0:
		d.corrupt("the first record says it has the previous record's stream")
		return
	}
	if flags&sameEpoch != 0 {
		r.Epoch = d.epoch
	} else {
		r.Epoch = d.uvarint("epoch")
	}
	if flags&sameSrc != 0 {
		r.SrcTask = d.src
	} else {
		r.SrcTask = d.int32("source task")
	}
	if flags&sameStream != 0 {
		r.Stream = d.stream
	} else {
		r.Stream = d.intern(d.bytes("stream name length"), r.Stream)
	}
	d.stream = r.Stream

	na := d.count("anchor count", anchorSize)
	if d.failed != 0 {
		return
	}
	r.Anchors = d.anchorSlice(r.Anchors, na, left)
	for j := range r.Anchors {
		// count checked that the anchors fit.
		r.Anchors[j] = Anchor{
			Tree: binary.LittleEndian.Uint64(d.data[d.off:]),
			Val:  binary.LittleEndian.Uint64(d.data[d.off+8:]),
		}
		d.off += anchorSize
	}

	nv := d.count("value count", 1)
	if d.failed != 0 {
		return
	}
	r.Values = d.valueSlice(r.Values, nv, left)
	for j := range r.Values {
		d.val = j
		r.Values[j] = d.value(0)
		if d.failed != 0 {
			return
		}
	}
	d.val = -1
}

// intern returns b as a string without allocating when it equals prev (the
// stream of the record that last used this slot) or a stream seen earlier
// in this frame. Sharing is safe because strings are immutable.
func (d *decoder) intern(b []byte, prev string) string {
	if prev == string(b) {
		return prev
	}
	for _, s := range d.streams[:d.nstream] {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if d.nstream < len(d.streams) {
		d.streams[d.nstream] = s
		d.nstream++
	} else {
		copy(d.streams[:], d.streams[1:])
		d.streams[len(d.streams)-1] = s
	}
	return s
}

// anchorSlice returns a slice of length n for a record whose previous
// anchors were s, reusing s when it is large enough.
func (d *decoder) anchorSlice(s []Anchor, n, left int) []Anchor {
	if n <= cap(s) {
		return s[:n]
	}
	if n > len(d.anchors) {
		d.anchors = make([]Anchor, slabSize(n, left, (len(d.data)-d.off)/anchorSize))
	}
	// The full slice expression keeps an append to one record's anchors
	// from overwriting the next record's.
	s = d.anchors[:n:n]
	d.anchors = d.anchors[n:]
	return s
}

// valueSlice is anchorSlice for values.
func (d *decoder) valueSlice(s []any, n, left int) []any {
	if n <= cap(s) {
		// Clear the tail so that values of an earlier, longer record can be
		// collected.
		clear(s[n:cap(s)])
		return s[:n]
	}
	if n > len(d.values) {
		d.values = make([]any, slabSize(n, left, len(d.data)-d.off))
	}
	s = d.values[:n:n]
	d.values = d.values[n:]
	return s
}

// slabSize guesses that the left records still to decode need n items each,
// but never more than limit, the most the remaining bytes can encode, so
// that a lying frame cannot make the decoder allocate more than its own size
// justifies. The caller has checked 0 < n <= limit.
func slabSize(n, left, limit int) int {
	if left > limit/n {
		return limit
	}
	return n * left
}

func (d *decoder) acks(f *Frame, n int) {
	if cap(f.Acks) < n {
		f.Acks = make([]AckMsg, n)
	}
	f.Acks = f.Acks[:n]
	for i := range f.Acks {
		d.item = i
		a := &f.Acks[i]
		t := d.byte("type")
		a.Tree = d.u64("tree")
		a.Val = d.u64("value")
		a.Task = d.int32("task")
		a.Err = d.errText()
		if d.failed != 0 {
			return
		}
		if a.Type = AckType(t); !a.Type.valid() {
			d.corrupt("unknown ack type %d", t)
			return
		}
	}
}

func (d *decoder) notices(f *Frame, n int) {
	if cap(f.Notices) < n {
		f.Notices = make([]Notice, n)
	}
	f.Notices = f.Notices[:n]
	for i := range f.Notices {
		d.item = i
		nt := &f.Notices[i]
		t := d.byte("type")
		nt.Tree = d.u64("tree")
		nt.Task = d.int32("task")
		nt.Err = d.errText()
		if d.failed != 0 {
			return
		}
		if nt.Type = NoticeType(t); !nt.Type.valid() {
			d.corrupt("unknown notice type %d", t)
			return
		}
	}
}

func (d *decoder) links(f *Frame, n int) {
	if cap(f.Links) < n {
		f.Links = make([]LinkMsg, n)
	}
	f.Links = f.Links[:n]
	for i := range f.Links {
		d.item = i
		l := &f.Links[i]
		t := d.byte("type")
		l.Epoch = d.uvarint("epoch")
		l.Seq = d.uvarint("sequence")
		l.Count = d.uvarint("count")
		if d.failed != 0 {
			return
		}
		if l.Type = LinkType(t); !l.Type.valid() {
			d.corrupt("unknown link type %d", t)
			return
		}
		if l.Type == LinkNack && l.Count == 0 {
			d.corrupt("NACK for 0 frames")
			return
		}
	}
}

// errText reads an Err field. Most acks and notices carry no error, a
// single zero byte, so that case is read here and inlines (the named
// result keeps it within the inlining budget); the rest is errTextSlow.
func (d *decoder) errText() (s string) {
	if d.off >= len(d.data) || d.data[d.off] != 0 {
		return d.errTextSlow()
	}
	d.off++
	return
}

func (d *decoder) errTextSlow() string {
	b := d.bytes("error length")
	if len(b) > MaxErrLen {
		d.corrupt("error text is %d bytes, more than MaxErrLen (%d)", len(b), MaxErrLen)
		return ""
	}
	return string(b)
}

// sharedString returns b, a piece of the frame's data, as a string value
// that refers to b's bytes: its header comes from a slab of the frame's
// string headers, and nothing is copied.
func (d *decoder) sharedString(b []byte) any {
	if len(b) == 0 {
		return ""
	}
	if len(d.strs) == 0 {
		// A string takes at least its tag and length byte, so the bytes
		// left bound how many headers the frame can still need.
		d.strs = make([]string, min(stringSlab, (len(d.data)-d.off)/2+1))
	}
	h := &d.strs[0]
	*h = unsafe.String(&b[0], len(b))
	d.strs = d.strs[1:]
	return strbox.Ref(h)
}

// stringSlab is how many string headers one allocation of an in-place
// decode holds: a word count frame's words in one or two.
const stringSlab = 256

// value decodes one value inside depth lists and maps.
func (d *decoder) value(depth int) any {
	tag := d.byte("value tag")
	if d.failed != 0 {
		return nil
	}
	switch tag {
	case tagString:
		b := d.bytes("string length")
		if d.failed != 0 {
			return nil
		}
		if d.inPlace {
			return d.sharedString(b)
		}
		// Header and bytes in one allocation, not two (strbox.Copy):
		// strings are most of the values a frame carries.
		return strbox.Copy(b)
	case tagInt:
		return d.varint("integer")
	case tagUint:
		return d.uvarint("unsigned integer")
	case tagFloat:
		return math.Float64frombits(d.u64("float"))
	case tagTrue:
		return true
	case tagFalse:
		return false
	case tagNil:
		return nil
	case tagBytes:
		b := d.bytes("byte string length")
		if d.failed != 0 {
			return nil
		}
		c := make([]byte, len(b))
		copy(c, b)
		return c
	case tagList:
		return d.list(depth)
	case tagMap:
		return d.mapValue(depth)
	}
	d.corrupt("unknown value tag %d", tag)
	return nil
}

// list decodes a list inside depth lists and maps, after its tag.
func (d *decoder) list(depth int) any {
	if depth >= MaxDepth {
		d.corrupt("lists and maps nest more than %d deep", MaxDepth)
		return nil
	}
	n := d.count("list length", 1)
	if d.failed != 0 {
		return nil
	}
	l := make([]any, n)
	for i := range l {
		if l[i] = d.value(depth + 1); d.failed != 0 {
			return nil
		}
	}
	return l
}

// mapValue decodes a map inside depth lists and maps, after its tag. It
// accepts the keys in any order but refuses a key given twice, whose first
// value would otherwise vanish unseen; AppendFrame never writes one.
func (d *decoder) mapValue(depth int) any {
	if depth >= MaxDepth {
		d.corrupt("lists and maps nest more than %d deep", MaxDepth)
		return nil
	}
	n := d.count("map size", minEntrySize)
	if d.failed != 0 {
		return nil
	}
	m := make(map[string]any, n)
	for range n {
		k := d.bytes("map key length")
		if d.failed != 0 {
			return nil
		}
		// The lookup converts k without allocating; only a stored key does.
		if _, dup := m[string(k)]; dup {
			d.corrupt("map has key %.64q twice", k)
			return nil
		}
		v := d.value(depth + 1)
		if d.failed != 0 {
			return nil
		}
		m[string(k)] = v
	}
	return m
}

func (d *decoder) byte(field string) byte {
	if d.off >= len(d.data) {
		d.fail(failShort, field, 0, 0)
		return 0
	}
	b := d.data[d.off]
	d.off++
	return b
}

func (d *decoder) u64(field string) uint64 {
	if len(d.data)-d.off < 8 {
		d.fail(failShort, field, 0, 0)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.data[d.off:])
	d.off += 8
	return v
}

func (d *decoder) uvarint(field string) uint64 {
	v, n := binary.Uvarint(d.data[d.off:])
	if n <= 0 {
		d.badVarint(field, n)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field string) int64 {
	v, n := binary.Varint(d.data[d.off:])
	if n <= 0 {
		d.badVarint(field, n)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) int32(field string) int32 {
	v := d.varint(field)
	if int64(int32(v)) != v {
		d.fail(failRange, field, uint64(v), 0)
		return 0
	}
	return int32(v)
}

// count reads a count of things that take at least size bytes each.
func (d *decoder) count(field string, size int) int {
	n := d.uvarint(field)
	if limit := (len(d.data) - d.off) / size; n > uint64(limit) {
		d.fail(failCount, field, n, limit)
		return 0
	}
	return int(n)
}

// bytes reads a length-prefixed byte string. The result aliases data.
func (d *decoder) bytes(field string) []byte {
	n := d.uvarint(field)
	if limit := len(d.data) - d.off; n > uint64(limit) {
		d.fail(failCount, field, n, limit)
		return nil
	}
	end := d.off + int(n)
	b := d.data[d.off:end:end]
	d.off = end
	return b
}

// failKind says how a read failed.
type failKind uint8

const (
	failShort    failKind = 1 + iota // the data ends inside the field
	failOverflow                     // a varint runs past 64 bits
	failCount                        // a count or length exceeds the bytes left
	failRange                        // a number does not fit its field
	failOther                        // err holds the error
)

// fail notes the first failed read. It stays cheap so that the read
// methods inline; error() turns the note into a message.
func (d *decoder) fail(k failKind, field string, n uint64, limit int) {
	if d.failed == 0 {
		d.failed, d.failField, d.failN, d.failLimit, d.failAt = k, field, n, limit, d.off
	}
}

// badVarint notes why binary.Uvarint or Varint returned n <= 0.
func (d *decoder) badVarint(field string, n int) {
	if n == 0 {
		d.fail(failShort, field, 0, 0)
	} else {
		d.fail(failOverflow, field, 0, 0)
	}
}

// corrupt fails with a message that the read methods cannot express.
func (d *decoder) corrupt(format string, args ...any) {
	if d.failed == 0 {
		d.failed = failOther
		d.err = fmt.Errorf("%w: %s: %s (at byte %d)", ErrCorrupt, d.where(), fmt.Sprintf(format, args...), d.off)
	}
}

// error returns the first failure as an error, or nil. The item and value
// indexes still name the failed place: loops stop at the first failure.
func (d *decoder) error() error {
	left := len(d.data) - d.failAt
	switch d.failed {
	case 0:
		return nil
	case failShort:
		return fmt.Errorf("%w: %s: %s needs more than the %d bytes left", ErrShort, d.where(), d.failField, left)
	case failOverflow:
		return fmt.Errorf("%w: %s: %s overflows 64 bits (at byte %d)", ErrCorrupt, d.where(), d.failField, d.failAt)
	case failCount:
		return fmt.Errorf("%w: %s: %s is %d, but the %d bytes left hold at most %d", ErrShort, d.where(), d.failField, d.failN, left, d.failLimit)
	case failRange:
		return fmt.Errorf("%w: %s: %s %d does not fit in 32 bits (at byte %d)", ErrCorrupt, d.where(), d.failField, int64(d.failN), d.failAt)
	}
	return d.err
}

// where names the place being decoded, to prefix errors.
func (d *decoder) where() string {
	if d.item < 0 {
		return "header"
	}
	item := "record"
	switch d.kind {
	case KindAck:
		item = "ack"
	case KindNotice:
		item = "notice"
	case KindLink:
		item = "link"
	}
	s := fmt.Sprintf("%s %d", item, d.item)
	if d.val >= 0 {
		s += fmt.Sprintf(", value %d", d.val)
	}
	return s
}
