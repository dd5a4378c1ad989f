package workers

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/wire"
)

func TestFrameFilter(t *testing.T) {
	ff := newFrameFilter(4, 1, false, nil)
	fr := func(src int32, epoch, seq uint64) *wire.Frame { return &wire.Frame{Src: src, Epoch: epoch, Seq: seq} }
	steps := []struct {
		f      *wire.Frame
		strict bool
		want   bool
		why    string
	}{
		{fr(1, 1, 1), true, true, "first frame"},
		{fr(1, 1, 1), true, false, "duplicate"},
		{fr(1, 1, 3), true, true, "gap"},
		{fr(1, 1, 2), true, true, "late but new"},
		{fr(1, 1, 2), true, false, "late duplicate"},
		{fr(2, 1, 1), true, true, "other sender has its own window"},
		{fr(1, 1, 3+window), true, true, "jump"},
		{fr(1, 1, 3), true, false, "older than the window, strict"},
		{fr(1, 1, 4), false, true, "older than the window, lenient"},
		{fr(1, 2, 1), true, true, "new incarnation starts over"},
		{fr(1, 1, 5000), true, false, "stale incarnation"},
		{fr(1, 2, 0), true, true, "unsequenced"},
		{fr(9, 1, 1), true, false, "unknown sender"},
		{fr(-1, 1, 1), true, false, "negative sender"},
	}
	for i, s := range steps {
		if got := ff.admit(s.f, s.strict); got != s.want {
			t.Fatalf("step %d (%s): admit = %v, want %v", i, s.why, got, s.want)
		}
	}
}

func TestFrameFilterSlidingWindow(t *testing.T) {
	ff := newFrameFilter(1, 1, false, nil)
	for s := uint64(1); s <= 5000; s++ {
		if !ff.admit(&wire.Frame{Epoch: 1, Seq: s}, true) {
			t.Fatalf("seq %d refused", s)
		}
		if s > 10 && ff.admit(&wire.Frame{Epoch: 1, Seq: s - 10}, true) {
			t.Fatalf("duplicate of seq %d admitted", s-10)
		}
	}
}

func TestFrameFilterFindsGapsAndLostLastFrames(t *testing.T) {
	cfg := lossConfig{grace: 10 * time.Millisecond, renack: 30 * time.Millisecond, maxNacks: 2}
	t0 := time.Unix(1000, 0)
	ff := newFrameFilter(4, 1, true, nil)
	admit := func(src int32, seq uint64) {
		t.Helper()
		if !ff.admit(&wire.Frame{Src: src, Epoch: 1, Seq: seq}, false) {
			t.Fatalf("frame %d/%d refused", src, seq)
		}
	}
	run := func(at time.Duration) (lossCounts, []nack) {
		var out []nack
		c := ff.check(t0.Add(at), cfg, func(src int32, msgs []wire.LinkMsg) {
			out = append(out, nack{src, append([]wire.LinkMsg(nil), msgs...)})
		})
		return c, out
	}
	admit(1, 1)
	admit(1, 2)
	admit(1, 5) // 3 and 4 missing
	admit(2, 2) // a first receiver incarnation: frame 1 of sender 2 is missing too
	ff.hwm(3, 1, 2)
	if _, out := run(0); len(out) != 0 {
		t.Fatalf("NACKed before the grace period: %+v", out)
	}
	admit(1, 4) // reordered, not lost
	_, out := run(10 * time.Millisecond)
	want := []nack{
		{1, []wire.LinkMsg{{Type: wire.LinkNack, Epoch: 1, Seq: 3, Count: 1}}},
		{2, []wire.LinkMsg{{Type: wire.LinkNack, Epoch: 1, Seq: 1, Count: 1}}},
		{3, []wire.LinkMsg{{Type: wire.LinkNack, Epoch: 1, Seq: 1, Count: 2}}},
	}
	if !reflect.DeepEqual(sortNacks(out), want) {
		t.Fatalf("NACKs %+v, want %+v", out, want)
	}
	if _, out := run(20 * time.Millisecond); len(out) != 0 {
		t.Fatalf("NACKed again before renack: %+v", out)
	}
	admit(1, 3)
	admit(2, 1)
	_, out = run(40 * time.Millisecond)
	if len(out) != 1 || out[0].src != 3 {
		t.Fatalf("after the resends only sender 3 still misses frames; NACKs %+v", out)
	}
	// The wait doubles with each NACK: 30 ms after the first, 60 after the
	// second, before the gap is given up.
	if c, out := run(80 * time.Millisecond); len(out) != 0 || c.givenUp != 0 {
		t.Fatalf("gave up or NACKed before twice the renack: NACKs %+v, given up %d", out, c.givenUp)
	}
	c, out := run(100 * time.Millisecond)
	if len(out) != 0 || c.givenUp != 2 {
		t.Fatalf("after maxNacks the gap is given up: NACKs %+v, given up %d", out, c.givenUp)
	}
	if _, out := run(200 * time.Millisecond); len(out) != 0 || len(ff.open) != 0 {
		t.Fatalf("a given-up gap stays open: %+v, open %v", out, ff.open)
	}
	// A high-water mark that nothing is missing below opens no gap.
	ff.hwm(1, 1, 5)
	if _, out := run(300 * time.Millisecond); len(out) != 0 {
		t.Fatalf("NACKs %+v for a complete sender", out)
	}
}

// TestRestartedReceiverDoesNotAskForOldFrames: a receiver that is a new
// incarnation of its worker meets senders mid-sequence; the frames before
// were meant for the incarnation that died.
func TestRestartedReceiverDoesNotAskForOldFrames(t *testing.T) {
	ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
	ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 40}, false)
	ff.hwm(1, 1, 70)
	if len(ff.open) != 0 {
		t.Fatalf("a restarted receiver watches senders %v", ff.open)
	}
	// A sender that restarts starts over at 1; its first frames can be
	// asked for.
	ff.admit(&wire.Frame{Src: 0, Epoch: 2, Seq: 3}, false)
	var msgs []wire.LinkMsg
	ff.check(time.Unix(0, 0), lossConfig{maxNacks: 1}, func(_ int32, m []wire.LinkMsg) { msgs = append(msgs, m...) })
	ff.check(time.Unix(1, 0), lossConfig{maxNacks: 1}, func(_ int32, m []wire.LinkMsg) { msgs = append(msgs, m...) })
	if len(msgs) != 1 || msgs[0].Seq != 1 || msgs[0].Count != 2 || msgs[0].Epoch != 2 {
		t.Fatalf("NACKs %+v, want frames 1-2 of epoch 2", msgs)
	}
}

func TestResendBufferKeepsTheNewestFrames(t *testing.T) {
	b := newResendBuffer(1000, false)
	frame := func(dst int, seq uint64) []byte {
		return []byte(fmt.Sprintf("%d/%03d:%s", dst, seq, strings.Repeat("x", 40)))
	}
	for seq := uint64(1); seq <= 100; seq++ {
		for dst := 0; dst < 2; dst++ {
			b.keepBytes(dst, seq, frame(dst, seq), time.Unix(0, 0))
		}
	}
	if b.held != 1000 {
		t.Fatalf("ring of %d bytes, want 1000", b.held)
	}
	// 46-byte frames in chunks of 125 bytes (an eighth of the limit): two
	// a chunk, eight chunks; the oldest chunk is evicted to make room, so
	// 14 to 16 of the newest are kept, and nothing older than them.
	kept, oldest := 0, 200
	for seq := uint64(1); seq <= 100; seq++ {
		for dst := 0; dst < 2; dst++ {
			f := b.find(dst, seq)
			if f == nil {
				if kept > 0 {
					t.Fatalf("frame %d/%d is not kept, but an older one is", dst, seq)
				}
				continue
			}
			kept++
			oldest = min(oldest, int(seq))
			if got := string(b.encoding(f)); got != string(frame(dst, seq)) {
				t.Fatalf("frame %d/%d reads back as %q", dst, seq, got)
			}
		}
	}
	if kept < 14 || kept > 16 || b.find(1, 100) == nil {
		t.Fatalf("%d frames kept from seq %d; newest %v", kept, oldest, b.find(1, 100) != nil)
	}
	enc := frame(0, 101)
	b.keepBytes(0, 101, enc, time.Unix(0, 0))
	enc[0] = 'X'
	if f := b.find(0, 101); f == nil || b.encoding(f)[0] != '0' {
		t.Fatal("keepBytes must keep a copy of an encoding made elsewhere")
	}
	b.keepBytes(0, 102, make([]byte, 2000), time.Unix(0, 0))
	if b.find(0, 102) != nil {
		t.Fatal("a frame larger than the ring is kept")
	}
}

// TestResendBufferKeepsEncodingsInPlace: frames encoded into tail stay
// where they were written, whatever their sizes (larger than a chunk,
// larger than tail's room, mixed with copies), and the ring keeps the
// newest of them within its limit, each reading back as it was written.
func TestResendBufferKeepsEncodingsInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const limit = 1 << 20
	b := newResendBuffer(limit, false)
	want := map[uint64][]byte{}
	at := time.Unix(1000, 0)
	inPlace, copies := 0, 0
	for seq := uint64(1); seq <= 5000; seq++ {
		n := 1 + rng.IntN(2000)
		switch rng.IntN(50) {
		case 0:
			n = 100_000 + rng.IntN(300_000) // a frame of large records
		case 1:
			n = limit + 1 // too large to keep
		}
		content := make([]byte, n)
		for i := range content {
			content[i] = byte(seq + uint64(i))
		}
		var enc []byte
		if rng.IntN(4) == 0 {
			enc = content // encoded elsewhere
		} else {
			enc = append(b.tail(at), content...)
		}
		tailed := len(b.chunks) > 0 && b.write < len(b.chunks[len(b.chunks)-1]) && &b.chunks[len(b.chunks)-1][b.write] == &enc[0]
		b.keepBytes(int(seq%3), seq, enc, at)
		if n > limit {
			if b.find(int(seq%3), seq) != nil {
				t.Fatalf("frame %d of %d bytes is kept in a ring of %d", seq, n, limit)
			}
			continue
		}
		want[seq] = content
		f := b.find(int(seq%3), seq)
		if f == nil {
			t.Fatalf("the newest frame %d is not kept", seq)
		}
		if tailed {
			inPlace++
			if &b.encoding(f)[0] != &enc[0] {
				t.Fatalf("frame %d was encoded into the tail but kept elsewhere", seq)
			}
		} else {
			copies++
		}
		if b.held > limit {
			t.Fatalf("the ring holds %d bytes, over its limit %d", b.held, limit)
		}
		for i := b.head; i < len(b.sent); i++ {
			s := &b.sent[i]
			if !bytes.Equal(b.encoding(s), want[s.seq]) {
				t.Fatalf("after frame %d: kept frame %d reads back wrong", seq, s.seq)
			}
		}
	}
	if inPlace < 3000 || copies < 1000 {
		t.Fatalf("%d frames kept in place and %d copied: the test did not exercise both", inPlace, copies)
	}
}

// TestResendRingGrowsWithTraffic: the ring starts small and doubles only
// when it would evict a frame younger than resendKeepFor, so a task that
// publishes little keeps a small ring however long it runs, and a busy one
// grows to the limit; frames survive the moves.
func TestResendRingGrowsWithTraffic(t *testing.T) {
	enc := func(seq uint64) []byte { return []byte(fmt.Sprintf("%06d%s", seq, strings.Repeat("y", 994))) }
	slow := newResendBuffer(8<<20, false)
	at := time.Unix(1000, 0)
	for seq := uint64(1); seq <= 2000; seq++ {
		slow.keepBytes(0, seq, enc(seq), at)
		at = at.Add(100 * time.Millisecond) // 10 KB/s
	}
	if slow.held != minResendRing {
		t.Fatalf("a task publishing 10 KB/s has a ring of %d bytes, want %d", slow.held, minResendRing)
	}
	busy := newResendBuffer(1<<20, false)
	for seq := uint64(1); seq <= 2000; seq++ {
		busy.keepBytes(0, seq, enc(seq), at) // 2 MB in no time
	}
	if busy.held != 1<<20 {
		t.Fatalf("a busy task has a ring of %d bytes, want the limit %d", busy.held, 1<<20)
	}
	for _, b := range []*resendBuffer{slow, busy} {
		newest := b.find(0, 2000)
		if newest == nil || string(b.encoding(newest)) != string(enc(2000)) {
			t.Fatal("the newest frame does not read back after the ring grew")
		}
		for i := b.head; i < len(b.sent); i++ {
			s := &b.sent[i]
			if string(b.encoding(s)) != string(enc(s.seq)) {
				t.Fatalf("frame %d reads back wrong after the ring grew", s.seq)
			}
		}
	}
}

// TestResendRingsFromThePoolReadBackRight: a task that ended gives its
// rings back, and the next task's rings may come from the pool with the
// old bytes in them; every frame the new task keeps still reads back as
// it was published, whether the ring came from the pool or not.
func TestResendRingsFromThePoolReadBackRight(t *testing.T) {
	for n, want := range map[int]int{minResendRing: 0, 2 * minResendRing: 1, 8 << 20: 7, 3 << 20: -1, minResendRing + 1: -1, 0: -1} {
		if got := ringClass(n); got != want {
			t.Errorf("ringClass(%d) = %d, want %d", n, got, want)
		}
	}
	at := time.Unix(1000, 0)
	for round := range 3 {
		enc := func(seq uint64) []byte {
			return []byte(fmt.Sprintf("%d:%06d%s", round, seq, strings.Repeat(string(rune('a'+round)), 500+int(seq%400))))
		}
		b := newResendBuffer(1<<20, false)
		for seq := uint64(1); seq <= 3000; seq++ {
			b.keepBytes(int(seq%3), seq, enc(seq), at)
		}
		if b.held != 1<<20 {
			t.Fatalf("round %d: ring of %d bytes, want the limit", round, b.held)
		}
		for i := b.head; i < len(b.sent); i++ {
			s := &b.sent[i]
			if string(b.encoding(s)) != string(enc(s.seq)) {
				t.Fatalf("round %d: frame %d reads back wrong", round, s.seq)
			}
		}
		if b.find(0, 3000) == nil {
			t.Fatalf("round %d: the newest frame is not kept", round)
		}
		b.release()
		if b.chunks != nil || b.find(0, 3000) != nil {
			t.Fatalf("round %d: a released buffer still holds frames", round)
		}
	}
}

type nack struct {
	src  int32
	msgs []wire.LinkMsg
}

func sortNacks(ns []nack) []nack {
	sort.Slice(ns, func(i, j int) bool { return ns[i].src < ns[j].src })
	return ns
}

// TestRestartedReceiverAsksNewSendersForEverything: after a rollback every
// worker restarts; a sender of a later incarnation than the receiver knew
// at its start started after it, so its first frames were meant for this
// receiver and a lost one is asked for.
// TestRestartedReceiverHearingALinkFrameFirst: a link frame (no sequence
// number) that comes before any data frame from a sender that kept
// running starts nothing; its high-water mark then says where the sender
// stands, and nothing below it is asked for. (A restarted receiver asked
// for the sender's whole resend buffer: about 2,000 frames per sender
// and move under crash chaos.)
func TestRestartedReceiverHearingALinkFrameFirst(t *testing.T) {
	ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
	link := &wire.Frame{Src: 0, Epoch: 1, Links: []wire.LinkMsg{{Type: wire.LinkHWM, Epoch: 1, Seq: 2000}}}
	if !ff.admit(link, false) {
		t.Fatal("a link frame was refused")
	}
	ff.hwm(0, 1, 2000)
	ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 2002}, false) // 2001 missing
	var msgs []wire.LinkMsg
	for _, at := range []int64{0, 1} {
		ff.check(time.Unix(at, 0), lossConfig{maxNacks: 1}, func(_ int32, m []wire.LinkMsg) { msgs = append(msgs, m...) })
	}
	if len(msgs) != 1 || msgs[0].Seq != 2001 || msgs[0].Count != 1 {
		t.Fatalf("NACKs %+v, want frame 2001 only", msgs)
	}
}

func TestRestartedReceiverAsksNewSendersForEverything(t *testing.T) {
	ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
	ff.admit(&wire.Frame{Src: 1, Epoch: 2, Seq: 5}, false)
	var msgs []wire.LinkMsg
	for _, at := range []int64{0, 1} {
		ff.check(time.Unix(at, 0), lossConfig{maxNacks: 1}, func(_ int32, m []wire.LinkMsg) { msgs = append(msgs, m...) })
	}
	if len(msgs) != 1 || msgs[0].Seq != 1 || msgs[0].Count != 4 {
		t.Fatalf("NACKs %+v, want frames 1-4", msgs)
	}
}

// TestMovedReceiverAsksForFramesAfterTheSendersStart: a moved slot's new
// owner counts a running sender's frames from the first that reaches it;
// the sender's LinkStart says where its frames for the new owner began,
// and the frames lost in between are asked for, whether the start comes
// before the first frame or after it. Frames before the start are not.
func TestMovedReceiverAsksForFramesAfterTheSendersStart(t *testing.T) {
	nacks := func(ff *frameFilter) []wire.LinkMsg {
		var msgs []wire.LinkMsg
		for _, at := range []int64{0, 1} {
			ff.check(time.Unix(at, 0), lossConfig{maxNacks: 1}, func(_ int32, m []wire.LinkMsg) { msgs = append(msgs, m...) })
		}
		return msgs
	}
	want := []wire.LinkMsg{{Type: wire.LinkNack, Epoch: 1, Seq: 41, Count: 2}}
	t.Run("start after the first frame", func(t *testing.T) {
		ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
		ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 43}, false) // 41 and 42 lost
		if got := nacks(ff); len(got) != 0 {
			t.Fatalf("NACKs %+v before the sender said where it started", got)
		}
		ff.start(0, 1, 40)
		if got := nacks(ff); !reflect.DeepEqual(got, want) {
			t.Fatalf("NACKs %+v, want %+v", got, want)
		}
		// The resent frames go on although later ones were delivered.
		for _, s := range []uint64{41, 42} {
			f := &wire.Frame{Src: 0, Epoch: 1, Seq: s}
			if !ff.admit(f, false) || len(ff.inOrder(f, nil)) != 1 {
				t.Fatalf("resent frame %d held or refused", s)
			}
		}
	})
	t.Run("start before any frame", func(t *testing.T) {
		ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
		ff.start(0, 1, 40)
		ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 43}, false)
		if got := nacks(ff); !reflect.DeepEqual(got, want) {
			t.Fatalf("NACKs %+v, want %+v", got, want)
		}
	})
	t.Run("frames from before the start", func(t *testing.T) {
		ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
		ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 38}, false)
		ff.admit(&wire.Frame{Src: 0, Epoch: 1, Seq: 42}, false) // 39-41 lost
		ff.start(0, 1, 40)
		want := []wire.LinkMsg{{Type: wire.LinkNack, Epoch: 1, Seq: 39, Count: 3}}
		if got := nacks(ff); !reflect.DeepEqual(got, want) {
			t.Fatalf("NACKs %+v, want %+v (the window began before the start)", got, want)
		}
	})
	t.Run("a start of an older epoch", func(t *testing.T) {
		ff := newFrameFilter(2, 2, true, func(int32) uint64 { return 1 })
		ff.admit(&wire.Frame{Src: 0, Epoch: 2, Seq: 3}, false)
		nacks(ff) // frames 1-2 of the restarted sender
		ff.admit(&wire.Frame{Src: 0, Epoch: 2, Seq: 1}, false)
		ff.admit(&wire.Frame{Src: 0, Epoch: 2, Seq: 2}, false)
		ff.start(0, 1, 0)
		if got := nacks(ff); len(got) != 0 {
			t.Fatalf("NACKs %+v after a stale start", got)
		}
	})
}

// TestSustainedLossIsResentNotGivenUp: a sender whose frames keep getting
// lost, one in five, always has a gap open at its receiver. Each lost
// frame is asked for and resent; none may be given up. When the NACKs
// were counted per sender rather than per series starting at the oldest
// missing frame, the count never went back to 0 while frames kept getting
// lost: the waits between NACKs doubled, and after maxNacks every frame
// missing then was given up, the newest without ever being asked for.
func TestSustainedLossIsResentNotGivenUp(t *testing.T) {
	cfg := lossConfig{grace: 2 * time.Millisecond, renack: 20 * time.Millisecond, maxNacks: 3}
	t0 := time.Unix(1000, 0)
	ff := newFrameFilter(2, 1, true, nil)
	admit := func(seq uint64) {
		t.Helper()
		if !ff.admit(&wire.Frame{Src: 1, Epoch: 1, Seq: seq}, false) {
			t.Fatalf("frame %d refused", seq)
		}
	}
	var seq uint64
	var givenUp, nacks int64
	lost := map[uint64]bool{}
	for step := range 200 {
		now := t0.Add(time.Duration(step) * 5 * time.Millisecond)
		for i := range 5 {
			seq++
			if i == 2 {
				lost[seq] = true
				continue
			}
			admit(seq)
		}
		var asked []uint64
		c := ff.check(now, cfg, func(src int32, msgs []wire.LinkMsg) {
			for _, m := range msgs {
				for s := m.Seq; s < m.Seq+m.Count; s++ {
					asked = append(asked, s)
				}
			}
		})
		givenUp, nacks = givenUp+c.givenUp, nacks+c.nacks
		// The sender resends what is asked for, and it arrives.
		for _, s := range asked {
			if lost[s] {
				delete(lost, s)
				admit(s)
			}
		}
	}
	if givenUp > 0 {
		t.Fatalf("%d lost frames given up (%d NACKs), though each was resent when asked for", givenUp, nacks)
	}
	if len(lost) > 2 {
		t.Fatalf("%d lost frames never asked for at the end: %v", len(lost), lost)
	}
}
