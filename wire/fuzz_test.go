package wire

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to DecodeFrame. It must not panic,
// and whatever it accepts must survive encode and decode unchanged, so that
// a frame a worker forwards or logs reads the same downstream.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range fuzzSeeds() {
		f.Add(mustEncode(f, fr))
	}
	for _, garbage := range fuzzGarbage() {
		f.Add(garbage)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, inPlace Frame
		err := DecodeFrame(data, &got)
		// In place, the same frame or the same error.
		if err2 := DecodeFrameInPlace(data, &inPlace); (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("DecodeFrame: %v; DecodeFrameInPlace: %v", err, err2)
		}
		if err == nil && !sameFrame(&got, &inPlace) {
			t.Fatalf("decoded in place %#v, copied %#v", inPlace, got)
		}
		kind, n, perr := PeekHeader(data)
		if err != nil {
			if got.Kind != 0 || got.Len() != 0 {
				t.Fatalf("DecodeFrame failed (%v) but left %d items", err, got.Len())
			}
			return
		}
		if perr != nil || kind != got.Kind || n != got.Len() {
			t.Fatalf("PeekHeader = %v, %d, %v; DecodeFrame gave %v with %d items", kind, n, perr, got.Kind, got.Len())
		}
		enc, err := AppendFrame(nil, &got)
		if err != nil {
			t.Fatalf("AppendFrame refused a frame DecodeFrame accepted: %v", err)
		}
		var again Frame
		if err := DecodeFrame(enc, &again); err != nil {
			t.Fatalf("DecodeFrame refused what AppendFrame wrote: %v", err)
		}
		if !sameFrame(&got, &again) {
			t.Fatalf("encode and decode changed the frame\nfirst  %#v\nsecond %#v", got, again)
		}
		if enc2, _ := AppendFrame(nil, &again); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not deterministic:\n%x\n%x", enc, enc2)
		}
		// Decoding into the used Frame must give the same result.
		if err := DecodeFrame(enc, &got); err != nil || !sameFrame(normalize(&got), normalize(&again)) {
			t.Fatalf("decoding into a reused Frame gave %v, %#v", err, got)
		}
	})
}

// fuzzSeeds are well-formed frames of every kind, using every value tag.
func fuzzSeeds() []*Frame {
	return []*Frame{
		richData(), richAcks(), richNotices(), richLinks(), wordCount(3), acks(3),
		{Kind: KindData}, {Kind: KindAck}, {Kind: KindNotice}, {Kind: KindLink},
		{Kind: KindData, Records: []Record{{Values: []any{math.NaN(), nested(MaxDepth)}}}},
		{Kind: KindData, Records: []Record{{Values: []any{
			map[string]any{"nan": math.NaN(), "u": uint64(math.MaxUint64), "l": []any{map[string]any{}}},
			nestedMix(MaxDepth), uint64(300),
		}}}},
		{Kind: KindAck, Acks: []AckMsg{{Type: AckFail, Tree: 7, Task: 2, Err: strings.Repeat("é", MaxErrLen)}}},
		{Kind: KindNotice, Notices: []Notice{{Type: NoticeFailed, Tree: 7, Task: -1, Err: strings.Repeat("x", MaxErrLen)}}},
		{Kind: KindLink, Src: 3, Epoch: 2, Seq: 9, Links: []LinkMsg{{Type: LinkNack, Epoch: 2, Seq: 5, Count: 3}, {Type: LinkHWM, Epoch: 2, Seq: 8}}},
	}
}

// fuzzGarbage are frames that DecodeFrame refuses, each just past one of
// its checks.
func fuzzGarbage() [][]byte {
	// hdr is a header with src 0, epoch 0 and seq 0, then rest.
	hdr := func(kind Kind, rest ...byte) []byte {
		return append([]byte{magic, Version, byte(kind), 0, 0, 0, 0}, rest...)
	}
	// value is a data frame whose one record holds one value.
	value := func(v ...byte) []byte {
		return hdr(KindData, append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, v...)...)
	}
	longErr := append([]byte{1, byte(AckFail), 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0x08}, bytes.Repeat([]byte{'e'}, MaxErrLen+1)...)
	return [][]byte{
		nil,
		{magic},
		{magic, 1, byte(KindData), 0, 0, 0, 0},
		{magic, Version + 1, byte(KindData), 0, 0, 0, 0},
		hdr(KindData, 0xff, 0xff, 0xff, 0xff, 0x0f),
		hdr(KindAck, 1, 0, 0),
		hdr(5, 0),
		[]byte(`{"kind":"data"}`),
		bytes.Repeat([]byte{tagList, 1}, 20),
		bytes.Repeat([]byte{tagMap, 1, 0}, 20),
		value(append(bytes.Repeat([]byte{tagMap, 1, 1, 'k'}, MaxDepth+1), tagNil)...),
		value(tagMap, 2, 1, 'a', tagNil, 1, 'a', tagNil),
		value(tagMap, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, tagNil),
		value(tagUint, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02),
		value(10),
		hdr(KindAck, longErr...),
		hdr(KindLink, 1, 3, 0, 0, 0),
		hdr(KindLink, 1, byte(LinkNack), 1, 1, 0),
	}
}

// sameFrame is reflect.DeepEqual except that floats compare by their bits,
// so that a NaN equals itself.
func sameFrame(a, b *Frame) bool {
	if a.Kind != b.Kind || a.Src != b.Src || a.Epoch != b.Epoch || a.Seq != b.Seq || a.DstEpoch != b.DstEpoch || len(a.Records) != len(b.Records) ||
		!reflect.DeepEqual(a.Acks, b.Acks) || !reflect.DeepEqual(a.Notices, b.Notices) || !reflect.DeepEqual(a.Links, b.Links) {
		return false
	}
	for i := range a.Records {
		ra, rb := a.Records[i], b.Records[i]
		if ra.ID != rb.ID || ra.Stream != rb.Stream || ra.SrcTask != rb.SrcTask || ra.Epoch != rb.Epoch ||
			!reflect.DeepEqual(ra.Anchors, rb.Anchors) || !sameValue(ra.Values, rb.Values) {
			return false
		}
	}
	return true
}

func sameValue(a, b any) bool {
	switch a := a.(type) {
	case float64:
		b, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(b)
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
