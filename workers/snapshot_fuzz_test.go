package workers

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeSnapshot feeds arbitrary bytes to decodeSnapshot, which reads
// a task's object of a checkpoint. It must not panic, must refuse with
// errSnapshot, and what it accepts must encode back to the same bytes (a
// task snapshot has one encoding).
func FuzzDecodeSnapshot(f *testing.F) {
	for _, seed := range [][]byte{
		encodeSpoutSnapshot([]byte{1, 2, 3}),
		encodeSpoutSnapshot(nil),
		encodeBoltSnapshot([]byte("keyed"), []byte("user"), true),
		encodeBoltSnapshot(nil, nil, false),
		encodeBoltSnapshot([]byte("k"), nil, true),
		nil, {snapshotVersion}, {snapshotVersion + 1, snapshotSpout, 0}, {snapshotVersion, 9, 0},
		{snapshotVersion, snapshotBolt, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{snapshotVersion, snapshotBolt, 0, 2},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSnapshot(b)
		if err != nil {
			if !errors.Is(err, errSnapshot) {
				t.Fatalf("refused with %v, which does not wrap errSnapshot", err)
			}
			return
		}
		var enc []byte
		if s.isBolt {
			enc = encodeBoltSnapshot(s.keyed, s.user, s.hasUser)
		} else {
			enc = encodeSpoutSnapshot(s.position)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("accepted %x, which encodes back as %x", b, enc)
		}
	})
}
