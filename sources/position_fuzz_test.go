package sources

import (
	"bytes"
	"math"
	"testing"
)

// FuzzDecodePosition feeds arbitrary bytes to decodePosition, which reads a
// spout's position from a checkpoint. It must not panic, must refuse what
// is not exactly one uvarint at most the limit, and what it accepts must
// encode back to the same bytes.
func FuzzDecodePosition(f *testing.F) {
	for _, seed := range [][]byte{
		encodePosition(0), encodePosition(1), encodePosition(300), encodePosition(maxOffset), encodePosition(math.MaxUint64),
		nil, {0x80}, {0x80, 0x00}, {0x01, 0x02}, bytes.Repeat([]byte{0xff}, 11),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodePosition(b, "test position", maxOffset)
		if err != nil {
			return
		}
		if n > maxOffset {
			t.Fatalf("accepted %d, above the limit", n)
		}
		if enc := encodePosition(n); !bytes.Equal(enc, b) {
			t.Fatalf("accepted %x as %d, which encodes as %x", b, n, enc)
		}
	})
}
