package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
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

// nestedMix returns a value with depth maps and lists, alternating, around
// "x": lists and maps count together toward MaxDepth.
func nestedMix(depth int) any {
	var v any = "x"
	for i := range depth {
		if i%2 == 0 {
			v = map[string]any{"k": v}
		} else {
			v = []any{v}
		}
	}
	return v
}

// richData is a data frame that uses every field and every value type.
func richData() *Frame {
	return &Frame{Kind: KindData, Src: -2, Epoch: 9, Seq: 1 << 40, DstEpoch: 5<<20 | 3, Records: []Record{
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
				uint64(0), uint64(1), uint64(127), uint64(128), uint64(math.MaxUint64),
				map[string]any{},
				map[string]any{"a": int64(1), "b": []any{"x", uint64(2)}, "": nil, "nested": map[string]any{"z": true}},
				map[string]any{"outer": []any{map[string]any{"inner": []byte("v"), "f": 1.5}}},
				nestedMix(MaxDepth),
			},
		},
		{ID: 1, Stream: "", SrcTask: -1},
		{ID: 2, Stream: "errors", SrcTask: math.MaxInt32, Epoch: math.MaxUint64, Values: []any{"only"}},
		{ID: 3, Stream: "default", SrcTask: math.MinInt32, Anchors: []Anchor{{Tree: 9, Val: 9}}},
		// The frame's epoch and sender and the previous stream, left out
		// of the encoding one at a time and together (record flags).
		{ID: 4, Stream: "default", SrcTask: -2, Epoch: 9, Values: []any{"w"}},
		{ID: 5, Stream: "default", SrcTask: -2, Epoch: 8},
		{ID: 6, Stream: "x", SrcTask: 4, Epoch: 9},
		{ID: 7, Stream: "x", SrcTask: -2, Epoch: 9},
	}}
}

func richAcks() *Frame {
	return &Frame{Kind: KindAck, Acks: []AckMsg{
		{Type: AckInit, Tree: 1, Val: 0xFFFF, Task: 0},
		{Type: AckAck, Tree: math.MaxUint64, Val: 0, Task: -1},
		{Type: AckFail, Tree: 3, Task: math.MaxInt32, Err: "bolt split: index out of range [3] with length 3"},
		{Type: AckReset, Tree: 4, Val: 5, Task: math.MinInt32},
		{Type: AckAbandon, Tree: 6, Task: 3},
		{Type: AckFail, Tree: 5, Task: -1, Err: strings.Repeat("é", MaxErrLen/2)},
	}}
}

func richNotices() *Frame {
	return &Frame{Kind: KindNotice, Notices: []Notice{
		{Type: NoticeComplete, Tree: 1, Task: -1},
		{Type: NoticeFailed, Tree: math.MaxUint64, Task: 7, Err: "héllo: timed out"},
		{Type: NoticeReset, Tree: 2, Task: math.MinInt32},
		{Type: NoticeFailed, Tree: 3, Task: math.MaxInt32, Err: strings.Repeat("x", MaxErrLen)},
	}}
}

func richLinks() *Frame {
	return &Frame{Kind: KindLink, Src: 4, Epoch: 2, Seq: 17, DstEpoch: math.MaxUint64, Links: []LinkMsg{
		{Type: LinkHWM, Epoch: 2, Seq: 16},
		{Type: LinkNack, Epoch: 1, Seq: 3, Count: 1},
		{Type: LinkNack, Epoch: math.MaxUint64, Seq: math.MaxUint64, Count: math.MaxUint64},
		{Type: LinkHWM},
		{Type: LinkStart, Epoch: 3 << 20, Seq: 77},
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
		{"empty links", &Frame{Kind: KindLink}},
		{"rich data", richData()},
		{"rich acks", richAcks()},
		{"rich notices", richNotices()},
		{"rich links", richLinks()},
		{"record without values", &Frame{Kind: KindData, Records: []Record{{ID: 5, Stream: "s"}}}},
		{"many anchors", &Frame{Kind: KindData, Records: []Record{{Anchors: make([]Anchor, 300)}}}},
		{"long string", &Frame{Kind: KindData, Records: []Record{{Values: []any{strings.Repeat("ab", 5000)}}}}},
		{"big map", &Frame{Kind: KindData, Records: []Record{{Values: []any{bigMap(300)}}}}},
		{"map inside list inside map", &Frame{Kind: KindData, Records: []Record{{Values: []any{
			map[string]any{"l": []any{map[string]any{"m": map[string]any{}}, []any{}}},
		}}}}},
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

// bigMap returns a map of n keys, more than appendMap sorts on the stack.
func bigMap(n int) map[string]any {
	m := make(map[string]any, n)
	for i := range n {
		m[strconv.Itoa(i)] = int64(i)
	}
	return m
}

func TestEncodeWidens(t *testing.T) {
	in := &Frame{Kind: KindData, Records: []Record{{Values: []any{
		int(-7), int32(math.MinInt32), float32(1.5), []any{int(3), float32(-0.25)},
		map[string]any{"i": int(2), "f": float32(0.5)}, []byte(nil), []any(nil), map[string]any(nil),
	}}}}
	want := &Frame{Kind: KindData, Records: []Record{{Values: []any{
		int64(-7), int64(math.MinInt32), float64(1.5), []any{int64(3), float64(-0.25)},
		map[string]any{"i": int64(2), "f": float64(0.5)}, []byte{}, []any{}, map[string]any{},
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
	selfMap := map[string]any{}
	selfMap["me"] = []any{selfMap}
	const supported = "use string, []byte, bool, nil, int64, uint64, float64, []any or map[string]any"
	tests := []struct {
		name string
		f    *Frame
		want string
	}{
		{"struct value", &Frame{Kind: KindData, Records: []Record{{}, {Values: []any{"ok", struct{}{}}}}},
			"wire: value 1 of record 1 has unsupported type struct {}; " + supported},
		{"uint32 value", &Frame{Kind: KindData, Records: []Record{{Values: []any{uint32(1)}}}},
			"wire: value 0 of record 0 has unsupported type uint32; " + supported},
		{"map of another type inside a list", &Frame{Kind: KindData, Records: []Record{{Values: []any{[]any{map[string]int{}}}}}},
			"wire: value 0 of record 0 has unsupported type map[string]int; " + supported},
		{"bad type inside a map", &Frame{Kind: KindData, Records: []Record{{Values: []any{nil, map[string]any{"a": 1, "b": []string{}}}}}},
			"wire: value 1 of record 0 has unsupported type []string; " + supported},
		{"named string type", &Frame{Kind: KindData, Records: []Record{{Values: []any{Kind(1)}}}},
			"wire: value 0 of record 0 has unsupported type wire.Kind; " + supported},
		{"too deep", &Frame{Kind: KindData, Records: []Record{{Values: []any{nested(MaxDepth + 1)}}}},
			"wire: value 0 of record 0 nests lists and maps more than 8 deep; flatten it"},
		{"too deep with maps", &Frame{Kind: KindData, Records: []Record{{Values: []any{nestedMix(MaxDepth + 1)}}}},
			"wire: value 0 of record 0 nests lists and maps more than 8 deep; flatten it"},
		{"list containing itself", &Frame{Kind: KindData, Records: []Record{{Values: []any{selfRef}}}},
			"wire: value 0 of record 0 nests lists and maps more than 8 deep; flatten it"},
		{"map containing itself", &Frame{Kind: KindData, Records: []Record{{Values: []any{selfMap}}}},
			"wire: value 0 of record 0 nests lists and maps more than 8 deep; flatten it"},
		{"unknown kind", &Frame{Kind: 9}, "wire: frame has unknown kind 9; use KindData, KindAck, KindNotice or KindLink"},
		{"zero kind", &Frame{}, "wire: frame has unknown kind 0; use KindData, KindAck, KindNotice or KindLink"},
		{"unknown ack type", &Frame{Kind: KindAck, Acks: []AckMsg{{Type: AckInit}, {Type: 0}}},
			"wire: ack 1 has unknown type 0; use AckInit, AckAck, AckFail, AckReset or AckAbandon"},
		{"unknown notice type", &Frame{Kind: KindNotice, Notices: []Notice{{Type: 4}}},
			"wire: notice 0 has unknown type 4; use NoticeComplete, NoticeFailed or NoticeReset"},
		{"unknown link type", &Frame{Kind: KindLink, Links: []LinkMsg{{Type: LinkHWM}, {Type: 4}}},
			"wire: link 1 has unknown type 4; use LinkHWM, LinkNack or LinkStart"},
		{"NACK for no frames", &Frame{Kind: KindLink, Links: []LinkMsg{{Type: LinkNack, Seq: 4}}},
			"wire: link 0 is a NACK for 0 frames; set Count to the number of frames to resend, or send nothing"},
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
		return append([]byte{magic, Version, byte(kind), 0, 0, 0, 0}, rest...)
	}
	// A data frame with one record: ID, epoch 0, task 0, empty stream, no
	// anchors, then the given value count and values.
	oneRecord := func(values ...byte) []byte {
		// count, ID, flags (none: epoch, task and stream follow), epoch,
		// task, stream length, anchor count
		return hdr(KindData, append([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, values...)...)
	}
	deep := []byte{1}
	for range MaxDepth + 1 {
		deep = append(deep, tagList, 1)
	}
	deep = append(deep, tagNil)
	// Maps and lists alternate; they count together toward MaxDepth.
	deepMix := []byte{1}
	for i := range MaxDepth + 1 {
		if i%2 == 0 {
			deepMix = append(deepMix, tagMap, 1, 1, 'k')
		} else {
			deepMix = append(deepMix, tagList, 1)
		}
	}
	deepMix = append(deepMix, tagNil)
	// An ack or notice with the given error length and that many bytes.
	longErr := func(n int) []byte {
		return append(binary.AppendUvarint(nil, uint64(n)), bytes.Repeat([]byte{'e'}, n)...)
	}
	tree := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	ack := func(typ AckType, task []byte, err []byte) []byte {
		b := append([]byte{1, byte(typ)}, tree...)
		b = append(b, 2, 0, 0, 0, 0, 0, 0, 0)
		return hdr(KindAck, append(append(b, task...), err...)...)
	}
	notice := func(typ NoticeType, task []byte, err []byte) []byte {
		b := append([]byte{1, byte(typ)}, tree...)
		return hdr(KindNotice, append(append(b, task...), err...)...)
	}
	beyondInt32 := []byte{0x80, 0x80, 0x80, 0x80, 0x10}

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
			fmt.Sprintf("frame is version %d, this build speaks version %d", Version+1, Version)},
		{"version 1", []byte{magic, 1, byte(KindData), 0}, ErrVersion,
			fmt.Sprintf("frame is version 1, this build speaks version %d", Version)},
		{"version zero", []byte{magic, 0}, ErrVersion, "version 0"},
		{"kind zero", hdr(0, 0), ErrCorrupt, "unknown frame kind 0"},
		{"unknown kind", hdr(5, 0), ErrCorrupt, "unknown frame kind 5"},
		{"trailing byte", hdr(KindData, 0, 0), ErrCorrupt, "1 bytes follow"},
		{"huge count", hdr(KindData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), ErrShort, "item count"},
		{"count overflows", hdr(KindData, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrCorrupt, "overflows"},
		{"count beyond bytes", hdr(KindNotice, 2, byte(NoticeComplete), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0), ErrShort, "at most 1"},
		{"link count beyond bytes", hdr(KindLink, 2, byte(LinkHWM), 0, 0, 0, 0), ErrShort, "item count is 2, but the 5 bytes left hold at most 1"},
		{"unknown value tag", oneRecord(1, 10), ErrCorrupt, "unknown value tag 10"},
		{"unsigned integer overflows", oneRecord(1, tagUint, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02), ErrCorrupt, "unsigned integer overflows"},
		{"unsigned integer cut short", oneRecord(1, tagUint, 0xff), ErrShort, "unsigned integer"},
		{"string longer than frame", oneRecord(1, tagString, 5, 'a'), ErrShort, "string length is 5"},
		{"list longer than frame", oneRecord(1, tagList, 100, tagNil), ErrShort, "list length"},
		{"too deep", oneRecord(deep...), ErrCorrupt, "lists and maps nest more than 8 deep"},
		{"maps and lists too deep", oneRecord(deepMix...), ErrCorrupt, "lists and maps nest more than 8 deep"},
		{"duplicate map key", oneRecord(1, tagMap, 3, 1, 'a', tagNil, 1, 'b', tagNil, 1, 'a', tagTrue), ErrCorrupt, `record 0, value 0: map has key "a" twice`},
		{"duplicate empty map key", oneRecord(1, tagMap, 2, 0, tagNil, 0, tagNil), ErrCorrupt, `map has key "" twice`},
		{"map size beyond bytes", oneRecord(1, tagMap, 3, 1, 'a', tagNil), ErrShort, "map size is 3, but the 3 bytes left hold at most 1"},
		{"huge map size", oneRecord(1, tagMap, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, tagNil), ErrShort, "map size"},
		{"map key longer than frame", oneRecord(1, tagMap, 1, 9, 'a', tagNil), ErrShort, "map key length is 9"},
		{"map value missing", oneRecord(1, tagMap, 1, 2, 'a', 'b'), ErrShort, "value tag"},
		{"value count beyond bytes", oneRecord(3, tagNil), ErrShort, "value count"},
		{"anchors beyond bytes", hdr(KindData, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0), ErrShort, "anchor count"},
		{"unknown record flags", hdr(KindData, 1, 1, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0), ErrCorrupt, "record 0: unknown record flags 0x08"},
		{"first record with the previous stream", hdr(KindData, 1, 1, 0, 0, 0, 0, 0, 0, 0, sameEpoch|sameSrc|sameStream, 0, 0), ErrCorrupt,
			"record 0: the first record says it has the previous record's stream"},
		{"no record flags", hdr(KindData, 2, 1, 0, 0, 0, 0, 0, 0, 0, sameEpoch|sameSrc, 0, 0, 1, tagString, 2, 'a', 'b', 2, 0, 0, 0, 0, 0, 0, 0),
			ErrShort, "record 1: record flags"},
		{"task beyond int32", ack(AckAck, beyondInt32, []byte{0}), ErrCorrupt, "ack 0: task 2147483648 does not fit in 32 bits"},
		{"unknown ack type", ack(0, []byte{0}, []byte{0}), ErrCorrupt, "unknown ack type 0"},
		{"ack error beyond the limit", ack(AckFail, []byte{0}, longErr(MaxErrLen+1)), ErrCorrupt, "ack 0: error text is 1025 bytes, more than MaxErrLen (1024)"},
		{"ack error beyond frame", ack(AckFail, []byte{0}, []byte{5, 'a'}), ErrShort, "error length is 5"},
		{"ack without error length", ack(AckFail, []byte{0}, nil), ErrShort, "item count is 1, but the 18 bytes left hold at most 0"},
		{"unknown notice type", notice(4, []byte{0}, []byte{0}), ErrCorrupt, "unknown notice type 4"},
		{"notice task beyond int32", notice(NoticeFailed, beyondInt32, []byte{0}), ErrCorrupt, "notice 0: task 2147483648 does not fit in 32 bits"},
		{"notice error beyond the limit", notice(NoticeFailed, []byte{1}, longErr(2*MaxErrLen)), ErrCorrupt, "notice 0: error text is 2048 bytes, more than MaxErrLen (1024)"},
		{"unknown link type", hdr(KindLink, 2, byte(LinkHWM), 0, 0, 0, 4, 0, 0, 0), ErrCorrupt, "link 1: unknown link type 4"},
		{"link type zero", hdr(KindLink, 1, 0, 0, 0, 0), ErrCorrupt, "unknown link type 0"},
		{"NACK for no frames", hdr(KindLink, 1, byte(LinkNack), 1, 5, 0), ErrCorrupt, "link 0: NACK for 0 frames"},
		{"link epoch overflows", hdr(KindLink, 1, byte(LinkHWM), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0), ErrCorrupt, "epoch overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A frame holding items of every kind must come back empty.
			f := *richData()
			f.Acks, f.Notices, f.Links = richAcks().Acks, richNotices().Notices, richLinks().Links
			err := DecodeFrame(tt.data, &f)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeFrame error = %v; want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not mention %q", err, tt.msg)
			}
			if f.Kind != 0 || f.Len() != 0 || len(f.Records)+len(f.Acks)+len(f.Notices)+len(f.Links) != 0 {
				t.Fatalf("failed decode left %#v; want an empty frame", f)
			}
		})
	}
}

// TestDecodeTruncated cuts valid frames at every byte: each prefix must be
// refused as short, without a panic.
func TestDecodeTruncated(t *testing.T) {
	for _, f := range []*Frame{
		richData(), richAcks(), richNotices(), richLinks(),
		{Kind: KindData}, {Kind: KindAck}, {Kind: KindNotice}, {Kind: KindLink},
	} {
		b := mustEncode(t, f)
		// The header is everything up to the first item; these frames have
		// fewer than 128 items, so their count takes one byte.
		header := len(mustEncode(t, &Frame{Kind: f.Kind, Src: f.Src, Epoch: f.Epoch, Seq: f.Seq, DstEpoch: f.DstEpoch}))
		var got Frame
		for i := range b {
			err := DecodeFrame(b[:i], &got)
			if !errors.Is(err, ErrShort) {
				t.Fatalf("%v frame cut to %d of %d bytes: error = %v; want ErrShort", f.Kind, i, len(b), err)
			}
			if got.Len() != 0 {
				t.Fatalf("%v frame cut to %d bytes left %d items", f.Kind, i, got.Len())
			}
			if _, _, err := PeekHeader(b[:i]); err == nil && i < header {
				t.Fatalf("PeekHeader accepted %d of the %d header bytes of a %v frame", i, header, f.Kind)
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
	big := []byte{magic, Version, byte(KindData), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}
	allocs := testing.AllocsPerRun(10, func() { _ = DecodeFrame(big, &f) })
	// The error message allocates; a slab for 2^32 records would be far more.
	if allocs > 10 {
		t.Fatalf("refusing a lying count made %v allocations", allocs)
	}
	// A list of 1000 elements in a 1000-byte frame is fine; its length is
	// bounded by the bytes left, not by the claim.
	rec := []byte{magic, Version, byte(KindData), 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, tagList, 0xe8, 0x07}
	rec = append(rec, bytes.Repeat([]byte{tagNil}, 1000)...)
	if err := DecodeFrame(rec, &f); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Records[0].Values[0].([]any)); n != 1000 {
		t.Fatalf("list has %d elements, want 1000", n)
	}
	// A map that claims 2^32 entries inside a small frame is refused the
	// same way, before make(map) is asked for room for them. Room for them
	// would be one huge allocation, so count bytes, not allocations.
	lyingMap := append(rec[:20:20], tagMap, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, tagNil)
	var err error
	if n := allocatedBytes(func() { err = DecodeFrame(lyingMap, &f) }); n > 4096 {
		t.Fatalf("refusing a lying map size allocated %d bytes", n)
	}
	if !errors.Is(err, ErrShort) {
		t.Fatalf("lying map size: error = %v; want ErrShort", err)
	}
}

// allocatedBytes returns how many bytes body allocates.
func allocatedBytes(body func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	body()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
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

// TestDecodeInPlace: decoded in place, a frame equals the copied decode,
// its string values (in lists and maps too) lie in the data's bytes, its
// map keys and []byte values do not, and strings take one allocation of
// headers for the frame, not one each.
func TestDecodeInPlace(t *testing.T) {
	b := mustEncode(t, richData())
	var f Frame
	if err := DecodeFrameInPlace(b, &f); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&f, richData()) {
		t.Fatalf("decoded in place %#v", f)
	}
	inData := func(p unsafe.Pointer) bool {
		return uintptr(p) >= uintptr(unsafe.Pointer(&b[0])) && uintptr(p) < uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))
	}
	var shared, copied int
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if len(v) > 0 && !inData(unsafe.Pointer(unsafe.StringData(v))) {
				t.Errorf("string %q is a copy", v)
			}
			shared++
		case []byte:
			if len(v) > 0 && inData(unsafe.Pointer(&v[0])) {
				t.Errorf("[]byte %q shares the data", v)
			}
			copied++
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				if len(k) > 0 && inData(unsafe.Pointer(unsafe.StringData(k))) {
					t.Errorf("map key %q shares the data", k)
				}
				walk(e)
			}
		}
	}
	for _, r := range f.Records {
		for _, v := range r.Values {
			walk(v)
		}
	}
	if shared < 10 || copied < 2 {
		t.Fatalf("walked %d strings and %d byte strings; richData has more", shared, copied)
	}
	words := mustEncode(t, wordCount(200))
	var g Frame
	if err := DecodeFrameInPlace(words, &g); err != nil { // arrays for g
		t.Fatal(err)
	}
	copies := testing.AllocsPerRun(20, func() { _ = DecodeFrame(words, &g) })
	inPlace := testing.AllocsPerRun(20, func() { _ = DecodeFrameInPlace(words, &g) })
	if inPlace > 3 || copies < 200 {
		t.Fatalf("a frame of 200 words: %v allocations in place, %v copying; want at most 3 and at least 200", inPlace, copies)
	}
}

// normalize maps empty slices to nil, the only difference a reused Frame
// may show from a new one.
func normalize(f *Frame) *Frame {
	g := &Frame{Kind: f.Kind, Src: f.Src, Epoch: f.Epoch, Seq: f.Seq, DstEpoch: f.DstEpoch}
	if len(f.Acks) > 0 {
		g.Acks = f.Acks
	}
	if len(f.Notices) > 0 {
		g.Notices = f.Notices
	}
	if len(f.Links) > 0 {
		g.Links = f.Links
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
		richLinks(), {Kind: KindLink}, richLinks(), richAcks(), wordCount(2),
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
	small := map[string]any{}
	for i := range 16 {
		small[strconv.Itoa(i)] = uint64(i)
	}
	for _, f := range []*Frame{
		wordCount(500), acks(500), richAcks(), richNotices(), richLinks(),
		{Kind: KindData, Records: []Record{{Values: []any{small, []any{small}, map[string]any{"m": small}}}}},
	} {
		buf := mustEncode(t, f)
		allocs := testing.AllocsPerRun(20, func() {
			buf, _ = AppendFrame(buf[:0], f)
		})
		if allocs != 0 {
			t.Fatalf("AppendFrame of a %v frame into a large enough buffer made %v allocations", f.Kind, allocs)
		}
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
	for k, want := range map[Kind]string{KindData: "data", KindAck: "ack", KindNotice: "notice", KindLink: "link", 0: "Kind(0)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

func TestLinkTypeString(t *testing.T) {
	for lt, want := range map[LinkType]string{LinkHWM: "HWM", LinkNack: "NACK", LinkStart: "start", 0: "LinkType(0)", 4: "LinkType(4)"} {
		if got := lt.String(); got != want {
			t.Errorf("LinkType(%d).String() = %q, want %q", uint8(lt), got, want)
		}
	}
}

// TestMapEncodingIsCanonical checks that a map encodes to the same bytes
// whatever order it was built in and Go iterates it in, small maps (keys
// sorted on the stack) and large ones alike, and that the keys go out sorted.
func TestMapEncodingIsCanonical(t *testing.T) {
	for _, n := range []int{2, 16, 17, 300} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
		var want []byte
		r := rand.New(rand.NewPCG(uint64(n), 3))
		for try := range 50 {
			// A new map for each insertion order: Go's iteration order
			// depends on both the map's seed and its history.
			r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			m := make(map[string]any)
			for _, k := range keys {
				m[k] = k
			}
			f := &Frame{Kind: KindData, Records: []Record{{Values: []any{m, []any{m}, map[string]any{"m": m}}}}}
			b := mustEncode(t, f)
			if try == 0 {
				want = b
			} else if !bytes.Equal(b, want) {
				t.Fatalf("%d keys, insertion order %d: the same map encoded differently:\n%x\n%x", n, try, b, want)
			}
		}
	}

	f := &Frame{Kind: KindData, Records: []Record{{Values: []any{map[string]any{"b": int64(1), "ab": true, "a": nil, "": uint64(300)}}}}}
	b := mustEncode(t, f)
	body := []byte{
		tagMap, 4,
		0, tagUint, 0xac, 0x02,
		1, 'a', tagNil,
		2, 'a', 'b', tagTrue,
		1, 'b', tagInt, 2,
	}
	if !bytes.HasSuffix(b, body) {
		t.Fatalf("map encoded as %x; want it to end with the sorted entries %x", b, body)
	}
}

// TestDecodeMapKeysInAnyOrder: the encoder sorts keys, but the decoder
// only refuses a key given twice, not keys out of order.
func TestDecodeMapKeysInAnyOrder(t *testing.T) {
	data := []byte{magic, Version, byte(KindData), 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		tagMap, 2, 1, 'b', tagTrue, 1, 'a', tagFalse}
	var f Frame
	if err := DecodeFrame(data, &f); err != nil {
		t.Fatal(err)
	}
	if got, want := f.Records[0].Values[0], (map[string]any{"a": false, "b": true}); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %#v, want %#v", got, want)
	}
}

func TestErrCut(t *testing.T) {
	a := strings.Repeat("a", MaxErrLen)
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"at the limit", a, a},
		{"one byte over", a + "b", a},
		{"far over", a + a, a},
		{"2-byte rune across the limit", a[1:] + "é" + "z", a[1:]},
		{"2-byte rune ending at the limit", a[2:] + "é" + "z", a[2:] + "é"},
		{"3-byte rune across the limit", a[2:] + "世" + "z", a[2:]},
		{"4-byte rune across the limit", a[3:] + "😀", a[3:]},
		{"4-byte rune cut after its first byte", a[1:] + "😀", a[1:]},
		{"all multibyte", strings.Repeat("世", MaxErrLen), strings.Repeat("世", MaxErrLen/3)},
		// Bytes that are not UTF-8 at all are cut at most 3 bytes short.
		{"invalid UTF-8", strings.Repeat("\x80", 2*MaxErrLen), strings.Repeat("\x80", MaxErrLen-3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &Frame{Kind: KindAck, Acks: []AckMsg{{Type: AckFail, Tree: 1, Task: 2, Err: tt.in}}}
			nin := &Frame{Kind: KindNotice, Notices: []Notice{{Type: NoticeFailed, Tree: 1, Task: 2, Err: tt.in}}}
			var f, nf Frame
			if err := DecodeFrame(mustEncode(t, in), &f); err != nil {
				t.Fatal(err)
			}
			if err := DecodeFrame(mustEncode(t, nin), &nf); err != nil {
				t.Fatal(err)
			}
			if got := f.Acks[0].Err; got != tt.want {
				t.Fatalf("ack Err cut to %d bytes %q; want %d bytes", len(got), got, len(tt.want))
			}
			if got := nf.Notices[0].Err; got != tt.want {
				t.Fatalf("notice Err cut to %d bytes %q; want %d bytes", len(got), got, len(tt.want))
			}
			if utf8.ValidString(tt.in) && !utf8.ValidString(f.Acks[0].Err) {
				t.Fatalf("cutting valid UTF-8 made it invalid: %q", f.Acks[0].Err)
			}
			if in.Acks[0].Err != tt.in {
				t.Fatal("AppendFrame changed the caller's AckMsg")
			}
		})
	}
}

// TestDecodeEmptiesOtherKinds decodes a frame of each kind into a Frame
// that holds items of every kind: only the decoded kind's slice may be
// non-empty afterwards, and the others keep their arrays for reuse.
func TestDecodeEmptiesOtherKinds(t *testing.T) {
	for _, want := range []*Frame{richData(), richAcks(), richNotices(), richLinks()} {
		f := *richData()
		f.Acks, f.Notices, f.Links = richAcks().Acks, richNotices().Notices, richLinks().Links
		if err := DecodeFrame(mustEncode(t, want), &f); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(&f), normalize(want)) {
			t.Fatalf("decoding a %v frame over a full Frame gave %#v", want.Kind, f)
		}
		if cap(f.Records) == 0 || cap(f.Acks) == 0 || cap(f.Notices) == 0 || cap(f.Links) == 0 {
			t.Fatalf("decoding a %v frame dropped an array: caps %d %d %d %d", want.Kind, cap(f.Records), cap(f.Acks), cap(f.Notices), cap(f.Links))
		}
	}
}

// randValue returns a value of a canonical type (the type it decodes as),
// with lists and maps nested at most depth more levels.
func randValue(r *rand.Rand, depth int) any {
	n := 10
	if depth == 0 {
		n = 8
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
		if r.IntN(8) == 0 {
			return []uint64{0, math.MaxUint64}[r.IntN(2)]
		}
		return r.Uint64() >> r.IntN(64)
	case 7:
		if r.IntN(2) == 0 {
			return []any{}
		}
		return map[string]any{}
	case 8:
		l := make([]any, r.IntN(4))
		for i := range l {
			l[i] = randValue(r, depth-1)
		}
		return l
	}
	m := make(map[string]any)
	for range r.IntN(4) {
		m[string(randBytes(r))] = randValue(r, depth-1)
	}
	return m
}

// randBytes returns a non-nil slice, as decoding gives, of any bytes.
func randBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(20))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// randErr returns an error text that AppendFrame does not cut: mostly
// none, as on most acks and notices.
func randErr(r *rand.Rand) string {
	if r.IntN(4) != 0 {
		return ""
	}
	return string(randBytes(r))
}

func randFrame(r *rand.Rand) *Frame {
	f := randItems(r)
	f.Src, f.Epoch, f.Seq = int32(r.Uint32()), r.Uint64()>>uint(r.IntN(64)), r.Uint64()>>uint(r.IntN(64))
	return f
}

func randItems(r *rand.Rand) *Frame {
	n := r.IntN(20)
	switch Kind(1 + r.IntN(4)) {
	case KindAck:
		f := &Frame{Kind: KindAck}
		for range n {
			f.Acks = append(f.Acks, AckMsg{Type: AckType(1 + r.IntN(4)), Tree: r.Uint64(), Val: r.Uint64(), Task: int32(r.Uint32()), Err: randErr(r)})
		}
		return f
	case KindNotice:
		f := &Frame{Kind: KindNotice}
		for range n {
			f.Notices = append(f.Notices, Notice{Type: NoticeType(1 + r.IntN(3)), Tree: r.Uint64(), Task: int32(r.Uint32()), Err: randErr(r)})
		}
		return f
	case KindLink:
		f := &Frame{Kind: KindLink}
		for range n {
			l := LinkMsg{Type: LinkHWM, Epoch: r.Uint64() >> r.IntN(64), Seq: r.Uint64() >> r.IntN(64)}
			switch r.IntN(3) {
			case 0:
				l.Type, l.Count = LinkNack, max(1, r.Uint64()>>r.IntN(64))
			case 1:
				l.Type = LinkStart
			}
			f.Links = append(f.Links, l)
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

// TestRecordsLeaveOutWhatTheyShare: a record whose epoch and source task
// are its frame's and whose stream is the record before it's costs its ID,
// a flags byte, its anchors and its values, nothing more; one that shares
// nothing still round-trips with all three written out.
func TestRecordsLeaveOutWhatTheyShare(t *testing.T) {
	frame := func(epoch uint64, src int32) *Frame {
		f := &Frame{Kind: KindData, Src: 3, Epoch: 5, Seq: 1}
		for i := range 100 {
			f.Records = append(f.Records, Record{ID: uint64(i), Stream: "default", SrcTask: src, Epoch: epoch,
				Anchors: []Anchor{{Tree: 1, Val: 2}}, Values: []any{"word"}})
		}
		return f
	}
	shared, err := AppendFrame(nil, frame(5, 3))
	if err != nil {
		t.Fatal(err)
	}
	apart, err := AppendFrame(nil, frame(6, 4))
	if err != nil {
		t.Fatal(err)
	}
	// Per record: ID 8, flags 1, anchor count 1, anchor 16, value count 1,
	// value 6; the first also writes its stream (8 bytes).
	header := len(shared) - 100*(8+1+1+16+1+6) - 8
	if header != 8 { // magic, version, kind, src, epoch, seq, destination epoch, count: a byte each
		t.Fatalf("100 records sharing their frame's fields took %d bytes, a header of %d; want 8", len(shared), header)
	}
	if want := len(shared) + 100*2; len(apart) != want { // an epoch and a task byte each
		t.Fatalf("records with their own epoch and task took %d bytes, want %d", len(apart), want)
	}
	for _, b := range [][]byte{shared, apart} {
		var got Frame
		if err := DecodeFrame(b, &got); err != nil {
			t.Fatal(err)
		}
		want := frame(5, 3)
		if len(b) == len(apart) {
			want = frame(6, 4)
		}
		if !reflect.DeepEqual(got.Records, want.Records) {
			t.Fatalf("decoded %+v, want %+v", got.Records[:2], want.Records[:2])
		}
	}
}
