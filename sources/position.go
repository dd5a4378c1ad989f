package sources

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Positions are single uvarints: the next index, byte offset or stream
// sequence to read. One number keeps a checkpoint small and lets any spout
// of this package decode another's position without a version byte.

// encodePosition returns the position bytes of n.
func encodePosition(n uint64) []byte { return binary.AppendUvarint(nil, n) }

// decodePosition reads a position written by encodePosition. It refuses
// bytes that are not exactly one uvarint, or a number above limit, because
// such a position belongs to another source or a corrupted checkpoint, and
// seeking to it would silently emit the wrong records.
func decodePosition(b []byte, what string, limit uint64) (uint64, error) {
	n, k := binary.Uvarint(b)
	// A uvarint padded with zero groups (80 00 for 0) decodes, but no
	// spout writes it: refused like any other foreign position.
	if k <= 0 || k != len(b) || len(encodePosition(n)) != k {
		return 0, fmt.Errorf("sources: position %x does not decode as a %s (one uvarint); was it taken from another kind of source?", b, what)
	}
	if n > limit {
		return 0, fmt.Errorf("sources: position %d is not a valid %s (at most %d); was it taken from another kind of source?", n, what, limit)
	}
	return n, nil
}

// maxOffset is the largest position an int64 offset can hold.
const maxOffset = math.MaxInt64
