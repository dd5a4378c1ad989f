package wire

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

// FuzzDecodeFrame feeds arbitrary bytes to DecodeFrame. It must not panic,
// and whatever it accepts must survive encode and decode unchanged, so that
// a frame a worker forwards or logs reads the same downstream.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range []*Frame{
		richData(), richAcks(), richNotices(), wordCount(3),
		{Kind: KindData}, {Kind: KindAck}, {Kind: KindNotice},
		{Kind: KindData, Records: []Record{{Values: []any{math.NaN(), nested(MaxDepth)}}}},
	} {
		f.Add(mustEncode(f, fr))
	}
	for _, garbage := range [][]byte{
		nil,
		{magic},
		{magic, Version, byte(KindData), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{magic, Version, byte(KindAck), 0, 0, 0, 1, 0, 0},
		[]byte(`{"kind":"data"}`),
		bytes.Repeat([]byte{tagList, 1}, 20),
	} {
		f.Add(garbage)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Frame
		err := DecodeFrame(data, &got)
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

// sameFrame is reflect.DeepEqual except that floats compare by their bits,
// so that a NaN equals itself.
func sameFrame(a, b *Frame) bool {
	if a.Kind != b.Kind || len(a.Records) != len(b.Records) ||
		!reflect.DeepEqual(a.Acks, b.Acks) || !reflect.DeepEqual(a.Notices, b.Notices) {
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
	}
	return reflect.DeepEqual(a, b)
}
