package wire

// Version is the frame format version written by this build. A frame whose
// version byte differs is refused with ErrVersion.
//
// Version 2 added uint64 and map values, the Err of acker messages, the Task
// and Err of notices, and link frames. Version 3 leaves out of a record the
// epoch, source task and stream that it shares with its frame and the
// record before it (a flags byte says which). Version 4 added the
// destination's epoch to the frame header (Frame.DstEpoch). Version 5
// added AckAbandon.
const Version = 5

// Kind says what a frame carries.
type Kind uint8

const (
	// KindData carries records to a task.
	KindData Kind = 1
	// KindAck carries acker messages (INIT, ACK, FAIL, RESET) to an acker task.
	KindAck Kind = 2
	// KindNotice carries acker verdicts (tree complete or failed) to the tasks
	// that asked to hear about a tree.
	KindNotice Kind = 3
	// KindLink carries transport control between two tasks: the loss
	// detection and retransmission requests of LinkMsg.
	KindLink Kind = 4
)

// Anchor ties a record to one tree: Tree is the tree (root attempt) ID, Val
// is the XOR of the edge IDs by which this record belongs to that tree.
type Anchor struct {
	Tree uint64
	Val  uint64
}

// Record is one record in flight with its envelope. The runtime uses the same
// struct in memory, so a record delivered inside one process is never encoded.
type Record struct {
	ID      uint64   // deterministic record ID (DESIGN.md section 3)
	Stream  string   // output stream of the emitting component
	SrcTask int32    // task that emitted it
	Epoch   uint64   // fencing epoch of the emitting task's owner
	Anchors []Anchor // empty when the record is not tracked
	Values  []any    // string, []byte, bool, nil, int64, uint64, float64, or []any and map[string]any of those
}

// AckType is the type of an acker message.
type AckType uint8

const (
	AckInit  AckType = 1 // spout: tree Tree starts, Val = XOR of the root edges, Task = spout task
	AckAck   AckType = 2 // bolt: Val = input edge XOR child edges; Task = task holding log entries or -1
	AckFail  AckType = 3 // fail tree Tree at once
	AckReset AckType = 4 // reset tree Tree's timeout
	// AckAbandon: spout: tree Tree, a failed attempt of a root now in the
	// dead letters, is over; the acker tells every task that keeps an
	// output log, which trims the tree's entries as a completed tree's.
	AckAbandon AckType = 5
)

// MaxErrLen is the most bytes of AckMsg.Err and Notice.Err a frame carries.
// The reason a tree failed is for people and logs; the limit keeps one
// verbose error from bloating every ack batch it travels in.
const MaxErrLen = 1024

// AckMsg is one message to an acker task.
type AckMsg struct {
	Type AckType
	Tree uint64
	Val  uint64
	Task int32
	// Err is the reason a FAIL was sent, empty for the other types.
	// AppendFrame cuts one longer than MaxErrLen.
	Err string
}

// NoticeType is the acker's verdict on a tree.
type NoticeType uint8

const (
	NoticeComplete NoticeType = 1
	NoticeFailed   NoticeType = 2
	// NoticeReset tells the spout that a bolt reset the tree's timeout
	// (Collector.ResetTimeout): the spout restarts its own timer.
	NoticeReset NoticeType = 3
)

// Notice tells a task that a tree completed or failed.
type Notice struct {
	Type NoticeType
	Tree uint64
	// Task is the task that failed the tree, -1 when unknown.
	Task int32
	// Err is the reason the tree failed. AppendFrame cuts one longer than
	// MaxErrLen.
	Err string
}

// LinkType says what a LinkMsg reports.
type LinkType uint8

const (
	// LinkHWM: the frame's sender tells the receiver that the frames it
	// sent to it in epoch Epoch go up to sequence number Seq, so that a
	// receiver can notice a lost last frame. Count is 0.
	LinkHWM LinkType = 1
	// LinkNack: the frame's sender (a receiver of data) asks the task the
	// frame is addressed to to send again its frames of epoch Epoch with
	// sequence numbers Seq .. Seq+Count-1, which never arrived.
	LinkNack LinkType = 2
	// LinkStart: the frame's sender tells a receiver that took over a
	// moved slot that the frames it sent in epoch Epoch to the slot's new
	// owner start after sequence number Seq. The receiver asks for any of
	// those it misses, even ones before the first frame that reached it,
	// and for none before Seq (they were for the owner that died). Count
	// is 0.
	LinkStart LinkType = 3
)

// LinkMsg is one transport control message between two tasks, about the
// frames (Frame.Epoch, Frame.Seq) of the data flowing between them.
type LinkMsg struct {
	Type  LinkType
	Epoch uint64
	Seq   uint64
	Count uint64
}

// Frame is one NATS message: a batch of one kind, addressed to one task.
// Only the slice that matches Kind is used.
//
// Src, Epoch and Seq name the frame: Seq counts the frames one incarnation
// (Epoch) of task Src has sent to one destination, from 1. Receivers use
// them to drop a frame the network delivered twice, which would otherwise
// be processed twice (breaking at-most-once) or XOR an ack in twice
// (stalling its tree until the timeout).
//
// DstEpoch is the epoch of the destination's owner as the sender knew it
// when it sent the frame. While a slot moves, its old and new owner can
// both be subscribed for a moment and both get the frame; the owner whose
// epoch it does not name can tell that the frame was not meant for it.
type Frame struct {
	Kind     Kind
	Src      int32
	Epoch    uint64
	Seq      uint64
	DstEpoch uint64
	Records  []Record
	Acks     []AckMsg
	Notices  []Notice
	Links    []LinkMsg
}

// Len is the number of items the frame carries.
func (f *Frame) Len() int {
	switch f.Kind {
	case KindData:
		return len(f.Records)
	case KindAck:
		return len(f.Acks)
	case KindNotice:
		return len(f.Notices)
	case KindLink:
		return len(f.Links)
	}
	return 0
}
