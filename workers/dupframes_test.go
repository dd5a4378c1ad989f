package workers

import (
	"testing"

	"github.com/ackflow/ackflow/wire"
)

func TestFrameFilter(t *testing.T) {
	ff := newFrameFilter(4)
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
	ff := newFrameFilter(1)
	for s := uint64(1); s <= 5000; s++ {
		if !ff.admit(&wire.Frame{Epoch: 1, Seq: s}, true) {
			t.Fatalf("seq %d refused", s)
		}
		if s > 10 && ff.admit(&wire.Frame{Epoch: 1, Seq: s - 10}, true) {
			t.Fatalf("duplicate of seq %d admitted", s-10)
		}
	}
}
