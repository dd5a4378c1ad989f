// Package wire is the frame codec: it turns a batch of records, acker
// messages, acker notices or link messages into the bytes of one NATS
// message and back.
//
// The format is versioned, compact and binary. Every frame starts with a
// header:
//
//	0xAF        magic, so that a stray message on an ackflow subject is refused
//	Version     one byte; a frame of another version is refused with ErrVersion
//	Kind        one byte: KindData, KindAck, KindNotice or KindLink
//	Src         varint: the sending task
//	Epoch, Seq  uvarints: the sender's epoch and the frame's sequence number
//	DstEpoch    uvarint: the epoch of the destination's owner, as the sender knew it
//	uvarint     number of items
//
// followed by the items, with no padding and nothing after the last one.
// Integers are unsigned varints (uvarint), zigzag varints (varint) or, for
// the random-looking 64-bit IDs that varints cannot shrink, 8 bytes little
// endian (u64):
//
//	record  ID u64, flags byte, Epoch uvarint unless flag 1, SrcTask
//	        varint unless flag 2, Stream (uvarint length, bytes) unless
//	        flag 4, anchor count uvarint, anchors (Tree u64, Val u64),
//	        value count uvarint, values. Flag 1 means the record's epoch
//	        is the frame's Epoch, 2 that its source task is the frame's
//	        Src, 4 that its stream is the previous record's (never set on
//	        the first); other bits are refused.
//	value   tag byte, then: nil, false, true: nothing; int64: varint;
//	        uint64: uvarint; float64: IEEE 754 bits u64; string, []byte:
//	        uvarint length, bytes; list ([]any): uvarint count, values;
//	        map (map[string]any): uvarint count, entries (key as uvarint
//	        length and bytes, then a value), written in key order; a key
//	        given twice is refused. Lists and maps together nest at most
//	        MaxDepth deep.
//	ack     Type byte, Tree u64, Val u64, Task varint, Err (uvarint length,
//	        at most MaxErrLen bytes)
//	notice  Type byte, Tree u64, Task varint, Err (as in ack)
//	link    Type byte, Epoch uvarint, Seq uvarint, Count uvarint
//
// DecodeFrame never panics and bounds every count by the bytes that remain,
// so a corrupt or truncated message costs an error, never a crash or a huge
// allocation: the receiver counts it and drops it (DESIGN.md section 9).
// It fills a caller's Frame in place and reuses its slices, so a receive
// loop that decodes into one Frame allocates little more than the string
// values themselves.
package wire
