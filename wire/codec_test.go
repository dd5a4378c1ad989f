package wire

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// nested returns a value with depth lists around "x".
func nested(depth int) any {
	var v any = "x"
	for range depth {
		v = []any{v}
	}
	return v
}

// richData is a data frame that uses every field and every value type.
func richData() *Frame {
	return &Frame{Kind: KindData, Src: -2, Epoch: 9, Seq: 1 << 40, Records: []Record{
		{
			ID: 0xDEADBEEFCAFEF00D, Stream: "default", SrcTask: 3, Epoch: 7,
			Anchors: []Anchor{{Tree: 1, Val: 2}, {Tree: math.MaxUint64, Val: 0}},
			Values: []any{
				nil, false, true,
				int64(0), int64(-1), int64(math.MinInt64), int64(math.MaxInt64),
				0.0, -2.5, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64,
				"", "word", "héllo, 世界", "\x00\xff",
				[]byte{}, []byte{0, 1, 2},
				[]any{}, []any{"a", int64(1), []any{nil, []byte("b")}},
				nested(MaxDepth),
			},
		},
		{ID: 1, Stream: "", SrcTask: -1},
		{ID: 2, Stream: "errors", SrcTask: math.MaxInt32, Epoch: math.MaxUint64, Values: []any{"only"}},
		{ID: 3, Stream: "default", SrcTask: math.MinInt32, Anchors: []Anchor{{Tree: 9, Val: 9}}},
	}}
}

func richAcks() *Frame {
	return &Frame{Kind: KindAck, Acks: []AckMsg{
		{Type: AckInit, Tree: 1, Val: 0xFFFF, Task: 0},
		{Type: AckAck, Tree: math.MaxUint64, Val: 0, Task: -1},
		{Type: AckFail, Tree: 3, Task: math.MaxInt32},
		{Type: AckReset, Tree: 4, Val: 5, Task: math.MinInt32},
	}}
}

func richNotices() *Frame {
	return &Frame{Kind: KindNotice, Notices: []Notice{
		{Type: NoticeComplete, Tree: 1},
		{Type: NoticeFailed, Tree: math.MaxUint64},
	}}
}

func mustEncode(t testing.TB, f *Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatalf("AppendFrame: %v", err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		f    *Frame
	}{
		{"empty data", &Frame{Kind: KindData}},
		{"empty acks", &Frame{Kind: KindAck}},
		{"empty notices", &Frame{Kind: KindNotice}},
		{"rich data", richData()},
		{"rich acks", richAcks()},
		{"rich notices", richNotices()},
		{"record without values", &Frame{Kind: KindData, Records: []Record{{ID: 5, Stream: "s"}}}},
		{"many anchors", &Frame{Kind: KindData, Records: []Record{{Anchors: make([]Anchor, 300)}}}},
		{"long string", &Frame{Kind: KindData, Records: []Record{{Values: []any{strings.Repeat("ab", 5000)}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustEncode(t, tt.f)
			var got Frame
			if err := DecodeFrame(b, &got); err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if !reflect.DeepEqual(&got, tt.f) {
				t.Fatalf("round trip changed the frame\n got %#v\nwant %#v", got, *tt.f)
			}
			kind, n, err := PeekHeader(b)
			if err != nil || kind != tt.f.Kind || n != tt.f.Len() {
				t.Fatalf("PeekHeader = %v, %d, %v; want %v, %d, nil", kind, n, err, tt.f.Kind, tt.f.Len())
			}
			// Encoding is deterministic, so re-encoding reproduces the bytes.
			if b2 := mustEncode(t, &got); !bytes.Equal(b, b2) {
				t.Fatalf("re-encoding differs:\n%x\n%x", b, b2)
			}
		})
	}
}

func TestAppendFrameAppends(t *testing.T) {
	prefix := []byte("prefix")
	b, err := AppendFrame(prefix, richAcks())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, prefix) {
		t.Fatalf("AppendFrame lost the prefix: %q", b)
	}
	var f Frame
	if err := DecodeFrame(b[len(prefix):], &f); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&f, richAcks()) {
		t.Fatalf("got %#v", f)
	}
}

func TestEncodeWidens(t *testing.T) {
	in := &Frame{Kind: KindData, Records: []Record{{Values: []any{
		int(-7), int32(math.MinInt32), float32(1.5), []any{int(3), float32(-0.25)},
	}}}}
	want := &Frame{Kind: KindData, Records: []Record{{Values: []any{
		int64(-7), int64(math.MinInt32), float64(1.5), []any{int64(3), float64(-0.25)},
	}}}}
	var got Frame
	if err := DecodeFrame(mustEncode(t, in), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("got %#v, want %#v", got, *want)
	}
}

func TestEncodeErrors(t *testing.T) {
	selfRef := []any{nil}
	selfRef[0] = selfRef
	tests := []struct {
		name string
		f    *Frame
		want string
	}{
		{"struct value", &Frame{Kind: KindData, Records: []Record{{}, {Values: []any{"ok", struct{}{}}}}},
			"wire: value 1 of record 1 has unsupported type struct {}; use string, []byte, int64, float64, bool or []any"},
		{"uint value", &Frame{Kind: KindData, Records: []Record{{Values: []any{uint64(1)}}}},
			"wire: value 0 of record 0 has unsupported type uint64; use string, []byte, int64, float64, bool or []any"},
		{"map inside a list", &Frame{Kind: KindData, Records: []Record{{Values: []any{[]any{map[string]int{}}}}}},
			"wire: value 0 of record 0 has unsupported type map[string]int; use string, []byte, int64, float64, bool or []any"},
		{"named string type", &Frame{Kind: KindData, Records: []Record{{Values: []any{Kind(1)}}}},
			"wire: value 0 of record 0 has unsupported type wire.Kind; use string, []byte, int64, float64, bool or []any"},
		{"too deep", &Frame{Kind: KindData, Records: []Record{{Values: []any{nested(MaxDepth + 1)}}}},
			"wire: value 0 of record 0 nests lists more than 8 deep; flatten it"},
		{"list containing itself", &Frame{Kind: KindData, Records: []Record{{Values: []any{selfRef}}}},
			"wire: value 0 of record 0 nests lists more than 8 deep; flatten it"},
		{"unknown kind", &Frame{Kind: 9}, "wire: frame has unknown kind 9; use KindData, KindAck or KindNotice"},
		{"zero kind", &Frame{}, "wire: frame has unknown kind 0; use KindData, KindAck or KindNotice"},
		{"unknown ack type", &Frame{Kind: KindAck, Acks: []AckMsg{{Type: AckInit}, {Type: 0}}},
			"wire: ack 1 has unknown type 0; use AckInit, AckAck, AckFail or AckReset"},
		{"unknown notice type", &Frame{Kind: KindNotice, Notices: []Notice{{Type: 4}}},
			"wire: notice 0 has unknown type 4; use NoticeComplete, NoticeFailed or NoticeReset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := append(make([]byte, 0, 64), "keep"...)
			got, err := AppendFrame(dst, tt.f)
			if err == nil {
				t.Fatal("AppendFrame succeeded; want an error")
			}
			if err.Error() != tt.want {
				t.Fatalf("error = %q\n          want %q", err, tt.want)
			}
			if string(got) != "keep" {
				t.Fatalf("AppendFrame left %q in the buffer; want it back as it was", got)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	// src 0, epoch 0, seq 0 follow the kind byte.
	hdr := func(kind Kind, rest ...byte) []byte {
		return append([]byte{magic, Version, byte(kind), 0, 0, 0}, rest...)
	}
	// A data frame with one record: ID, epoch 0, task 0, empty stream, no
	// anchors, then the given value count and values.
	oneRecord := func(values ...byte) []byte {
		return hdr(KindData, append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, values...)...)
	}
	deep := []byte{1}
	for range MaxDepth + 1 {
		deep = append(deep, tagList, 1)
	}
	deep = append(deep, tagNil)

	tests := []struct {
		name string
		data []byte
		want error
		msg  string // a substring the message must contain
	}{
		{"nil", nil, ErrShort, ""},
		{"magic only", []byte{magic}, ErrShort, ""},
		{"no kind", []byte{magic, Version}, ErrShort, ""},
		{"no count", []byte{magic, Version, byte(KindData)}, ErrShort, ""},
		{"bad magic", []byte{'{', '"', 'a'}, ErrMagic, "0x7b"},
		{"bad magic, one byte", []byte{0}, ErrMagic, ""},
		{"newer version", []byte{magic, Version + 1, byte(KindData), 0}, ErrVersion,
			"frame is version 2, this build speaks version 1"},
		{"version zero", []byte{magic, 0}, ErrVersion, "version 0"},
		{"kind zero", hdr(0, 0), ErrCorrupt, "unknown frame kind 0"},
		{"unknown kind", hdr(4, 0), ErrCorrupt, "unknown frame kind 4"},
		{"trailing byte", hdr(KindData, 0, 0), ErrCorrupt, "1 bytes follow"},
		{"huge count", hdr(KindData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), ErrShort, "item count"},
		{"count overflows", hdr(KindData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrCorrupt, "overflows"},
		{"count beyond bytes", hdr(KindNotice, 2, byte(NoticeComplete), 1, 0, 0, 0, 0, 0, 0, 0), ErrShort, "at most 1"},
		{"unknown value tag", oneRecord(1, 8), ErrCorrupt, "unknown value tag 8"},
		{"string longer than frame", oneRecord(1, tagString, 5, 'a'), ErrShort, "string length is 5"},
		{"list longer than frame", oneRecord(1, tagList, 100, tagNil), ErrShort, "list length"},
		{"too deep", oneRecord(deep...), ErrCorrupt, "nest more than 8 deep"},
		{"value count beyond bytes", oneRecord(3, tagNil), ErrShort, "value count"},
		{"anchors beyond bytes", hdr(KindData, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0), ErrShort, "anchor count"},
		{"task beyond int32", hdr(KindAck, 1, byte(AckAck), 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10),
			ErrCorrupt, "does not fit in 32 bits"},
		{"unknown ack type", hdr(KindAck, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0), ErrCorrupt, "unknown ack type 0"},
		{"unknown notice type", hdr(KindNotice, 1, 4, 1, 0, 0, 0, 0, 0, 0, 0), ErrCorrupt, "unknown notice type 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := *richData()
			err := DecodeFrame(tt.data, &f)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeFrame error = %v; want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not mention %q", err, tt.msg)
			}
			if f.Kind != 0 || f.Len() != 0 || len(f.Records)+len(f.Acks)+len(f.Notices) != 0 {
				t.Fatalf("failed decode left %#v; want an empty frame", f)
			}
		})
	}
}

// TestDecodeTruncated cuts valid frames at every byte: each prefix must be
// refused as short, without a panic.
func TestDecodeTruncated(t *testing.T) {
	for _, f := range []*Frame{richData(), richAcks(), richNotices(), {Kind: KindData}} {
		b := mustEncode(t, f)
		var got Frame
		for i := range b {
			err := DecodeFrame(b[:i], &got)
			if !errors.Is(err, ErrShort) {
				t.Fatalf("%v frame cut to %d of %d bytes: error = %v; want ErrShort", f.Kind, i, len(b), err)
			}
			if got.Len() != 0 {
				t.Fatalf("%v frame cut to %d bytes left %d items", f.Kind, i, got.Len())
			}
			if _, _, err := PeekHeader(b[:i]); err == nil && i < 4 {
				t.Fatalf("PeekHeader accepted %d header bytes", i)
			}
		}
		// And garbage after a valid frame is refused too.
		if err := DecodeFrame(append(b, 0), &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%v frame with a trailing byte: error = %v; want ErrCorrupt", f.Kind, err)
		}
	}
}

// TestDecodeBoundsAllocation feeds counts that claim far more than the data
// holds; the decoder must refuse them before allocating for them.
func TestDecodeBoundsAllocation(t *testing.T) {
	var f Frame
	big := []byte{magic, Version, byte(KindData), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	allocs := testing.AllocsPerRun(10, func() { _ = DecodeFrame(big, &f) })
	// The error message allocates; a slab for 2^32 records would be far more.
	if allocs > 10 {
		t.Fatalf("refusing a lying count made %v allocations", allocs)
	}
	// A list of 1000 elements in a 1000-byte frame is fine; its length is
	// bounded by the bytes left, not by the claim.
	rec := []byte{magic, Version, byte(KindData), 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, tagList, 0xe8, 0x07}
	rec = append(rec, bytes.Repeat([]byte{tagNil}, 1000)...)
	if err := DecodeFrame(rec, &f); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Records[0].Values[0].([]any)); n != 1000 {
		t.Fatalf("list has %d elements, want 1000", n)
	}
}

// TestDecodeCopies checks that decoded strings and byte slices survive the
// caller reusing the input buffer.
func TestDecodeCopies(t *testing.T) {
	b := mustEncode(t, richData())
	var f Frame
	if err := DecodeFrame(b, &f); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xEE
	}
	if !reflect.DeepEqual(&f, richData()) {
		t.Fatalf("overwriting the input changed the decoded frame: %#v", f)
	}
}

// normalize maps empty slices to nil, the only difference a reused Frame
// may show from a new one.
func normalize(f *Frame) *Frame {
	g := &Frame{Kind: f.Kind}
	if len(f.Acks) > 0 {
		g.Acks = f.Acks
	}
	if len(f.Notices) > 0 {
		g.Notices = f.Notices
	}
	for _, r := range f.Records {
		if len(r.Anchors) == 0 {
			r.Anchors = nil
		}
		if len(r.Values) == 0 {
			r.Values = nil
		}
		g.Records = append(g.Records, r)
	}
	return g
}

// TestDecodeReuse decodes frames of every kind and size into one Frame and
// checks each result against a decode into a new Frame.
func TestDecodeReuse(t *testing.T) {
	frames := []*Frame{
		richData(), wordCount(500), richAcks(), wordCount(3), richNotices(),
		{Kind: KindData}, richData(), wordCount(40), acks(500), richData(),
	}
	var reused Frame
	for i, want := range frames {
		if err := DecodeFrame(mustEncode(t, want), &reused); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(&reused), normalize(want)) {
			t.Fatalf("frame %d decoded into a reused Frame differs:\n got %#v\nwant %#v", i, reused, *want)
		}
	}
	// Records beyond the current length must not keep old values alive.
	for _, r := range reused.Records[len(reused.Records):cap(reused.Records)] {
		for _, v := range r.Values[:cap(r.Values)] {
			if v != nil {
				t.Fatalf("a record past the end still holds %#v", v)
			}
		}
	}
}

// TestDecodeSlicesDoNotOverlap appends to one decoded record's slices and
// checks that its neighbours, which may share a slab, are unchanged.
func TestDecodeSlicesDoNotOverlap(t *testing.T) {
	want := wordCount(10)
	var f Frame
	if err := DecodeFrame(mustEncode(t, want), &f); err != nil {
		t.Fatal(err)
	}
	f.Records[0].Anchors = append(f.Records[0].Anchors, Anchor{Tree: 42})
	f.Records[0].Values = append(f.Records[0].Values, "extra")
	f.Records[0].Anchors, f.Records[0].Values = want.Records[0].Anchors, want.Records[0].Values
	if !reflect.DeepEqual(&f, want) {
		t.Fatalf("appending to record 0 changed another record: %#v", f.Records[1])
	}
}

func TestStreamInterned(t *testing.T) {
	in := wordCount(500)
	in.Records[7].Stream = "other"
	var f Frame
	if err := DecodeFrame(mustEncode(t, in), &f); err != nil {
		t.Fatal(err)
	}
	first := unsafe.StringData(f.Records[0].Stream)
	for i, r := range f.Records {
		if r.Stream == "default" && unsafe.StringData(r.Stream) != first {
			t.Fatalf("record %d has its own copy of the stream name", i)
		}
	}
}

func TestEncodeDoesNotAllocate(t *testing.T) {
	f := wordCount(500)
	buf := mustEncode(t, f)
	allocs := testing.AllocsPerRun(20, func() {
		buf, _ = AppendFrame(buf[:0], f)
	})
	if allocs != 0 {
		t.Fatalf("AppendFrame into a large enough buffer made %v allocations", allocs)
	}
}

func TestDecodeAllocations(t *testing.T) {
	f := wordCount(500)
	b := mustEncode(t, f)
	var got Frame
	if err := DecodeFrame(b, &got); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() { _ = DecodeFrame(b, &got) })
	// A string value costs its bytes plus the interface that holds it.
	if max := 2.0 * 500; allocs > max {
		t.Fatalf("decoding 500 records into a reused Frame made %v allocations; want at most %v", allocs, max)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindData: "data", KindAck: "ack", KindNotice: "notice", 0: "Kind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// randValue returns a value of a canonical type (the type it decodes as),
// with lists nested at most depth more levels.
func randValue(r *rand.Rand, depth int) any {
	n := 8
	if depth == 0 {
		n = 7
	}
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		switch r.IntN(3) {
		case 0:
			return int64(r.IntN(256)) - 128
		case 1:
			return int64(r.Uint64())
		}
		return []int64{math.MinInt64, math.MaxInt64, 0}[r.IntN(3)]
	case 3:
		if r.IntN(8) == 0 {
			return []float64{math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64}[r.IntN(4)]
		}
		return r.NormFloat64() * 1e6
	case 4:
		return string(randBytes(r))
	case 5:
		return randBytes(r)
	case 6:
		return []any{}
	}
	l := make([]any, r.IntN(4))
	for i := range l {
		l[i] = randValue(r, depth-1)
	}
	return l
}

// randBytes returns a non-nil slice, as decoding gives, of any bytes.
func randBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(20))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randFrame(r *rand.Rand) *Frame {
	f := randItems(r)
	f.Src, f.Epoch, f.Seq = int32(r.Uint32()), r.Uint64()>>uint(r.IntN(64)), r.Uint64()>>uint(r.IntN(64))
	return f
}

func randItems(r *rand.Rand) *Frame {
	n := r.IntN(20)
	switch Kind(1 + r.IntN(3)) {
	case KindAck:
		f := &Frame{Kind: KindAck}
		for range n {
			f.Acks = append(f.Acks, AckMsg{Type: AckType(1 + r.IntN(4)), Tree: r.Uint64(), Val: r.Uint64(), Task: int32(r.Uint32())})
		}
		return f
	case KindNotice:
		f := &Frame{Kind: KindNotice}
		for range n {
			f.Notices = append(f.Notices, Notice{Type: NoticeType(1 + r.IntN(2)), Tree: r.Uint64()})
		}
		return f
	}
	f := &Frame{Kind: KindData}
	streams := []string{"default", "", "errors", "s\x00tream"}
	for range n {
		rec := Record{
			ID: r.Uint64(), Stream: streams[r.IntN(len(streams))], SrcTask: int32(r.Uint32()), Epoch: r.Uint64() >> r.IntN(64),
		}
		for range r.IntN(4) {
			rec.Anchors = append(rec.Anchors, Anchor{Tree: r.Uint64(), Val: r.Uint64()})
		}
		for range r.IntN(6) {
			rec.Values = append(rec.Values, randValue(r, MaxDepth))
		}
		f.Records = append(f.Records, rec)
	}
	return f
}

// TestRoundTripRandom is a property test: for random frames of canonical
// values, decode(encode(f)) equals f, into a new Frame and into a reused one.
func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var reused Frame
	var buf []byte
	for i := range 3000 {
		f := randFrame(r)
		var err error
		if buf, err = AppendFrame(buf[:0], f); err != nil {
			t.Fatalf("frame %d: AppendFrame: %v", i, err)
		}
		var got Frame
		if err := DecodeFrame(buf, &got); err != nil {
			t.Fatalf("frame %d: DecodeFrame: %v", i, err)
		}
		if !reflect.DeepEqual(&got, f) {
			t.Fatalf("frame %d: round trip changed it\n got %#v\nwant %#v", i, got, *f)
		}
		if err := DecodeFrame(buf, &reused); err != nil {
			t.Fatalf("frame %d: DecodeFrame into a reused Frame: %v", i, err)
		}
		if !reflect.DeepEqual(normalize(&reused), normalize(f)) {
			t.Fatalf("frame %d: decoding into a reused Frame changed it\n got %#v\nwant %#v", i, reused, *f)
		}
	}
}
