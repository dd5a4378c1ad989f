package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/wire"
)

func TestParse(t *testing.T) {
	c, err := Parse("drop=0.05,dup=0.01,reorder=0.1,delay=2ms,crash-every=3s,seed=7")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Drop: 0.05, Dup: 0.01, Reorder: 0.1, Delay: 2 * time.Millisecond, DelayProb: 1, CrashEvery: 3 * time.Second, Seed: 7}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
	if back, err := Parse(c.String()); err != nil || back != want {
		t.Fatalf("String does not round-trip: %q -> %+v, %v", c.String(), back, err)
	}
	for in, msg := range map[string]string{
		"drop":            "key=value",
		"drop=x":          "bad value for drop",
		"drop=1.5":        "probability",
		"nope=1":          "unknown key",
		"crash-every=1ms": "shorter than failure detection",
		"delay=-1s":       "negative",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", in, err, msg)
		}
	}
	if c, err := Parse(""); err != nil || c.Enabled() {
		t.Fatalf("empty config: %+v %v", c, err)
	}
}

// sends pushes n frames through a link and returns the delivered sequence.
func sends(cfg Config, n int) ([]uint64, *Counters) {
	var got []uint64
	cnt := &Counters{}
	l := NewLink(cfg, 3, func(_ int, f *wire.Frame) { got = append(got, f.Seq) }, cnt)
	for i := 1; i <= n; i++ {
		l.Send(0, &wire.Frame{Kind: wire.KindData, Seq: uint64(i), Records: make([]wire.Record, 2)})
	}
	for l.Poll(time.Now().Add(time.Hour)) > 0 {
	}
	return got, cnt
}

func TestLinkIsDeterministicAndDoesWhatItSays(t *testing.T) {
	cfg := Config{Drop: 0.1, Dup: 0.1, Reorder: 0.1, Delay: time.Millisecond, DelayProb: 0.2, Seed: 42}
	a, cnt := sends(cfg, 10000)
	b, _ := sends(cfg, 10000)
	if len(a) != len(b) {
		t.Fatalf("same seed, different lengths %d and %d", len(a), len(b))
	}
	dropped, dups := cnt.FramesDropped.Load(), cnt.FramesDuplicated.Load()
	if want := int64(10000) - dropped + dups; int64(len(a)) != want {
		t.Fatalf("delivered %d frames, want %d (10000 - %d dropped + %d duplicated)", len(a), want, dropped, dups)
	}
	for name, v := range map[string]int64{"dropped": dropped, "duplicated": dups, "reordered": cnt.FramesReordered.Load(), "delayed": cnt.FramesDelayed.Load()} {
		if v < 500 || v > 2500 {
			t.Errorf("%s %d frames of 10000; want about 1000", name, v)
		}
	}
	if cnt.RecordsDropped.Load() != 2*dropped {
		t.Errorf("records dropped %d, want %d", cnt.RecordsDropped.Load(), 2*dropped)
	}
	outOfOrder := 0
	for i := 1; i < len(a); i++ {
		if a[i] < a[i-1] {
			outOfOrder++
		}
	}
	if outOfOrder == 0 {
		t.Error("nothing was delivered out of order")
	}
	c, _ := sends(Config{Seed: 1}, 100)
	for i, s := range c {
		if s != uint64(i+1) {
			t.Fatalf("a zero config changed the stream at %d: %v", i, c[:i+1])
		}
	}
}

// TestHeldRecordsCountWhatNeverWentOut: at any moment, the records of the
// frames a link holds are those of the frames it neither dropped nor let
// out in some copy: a frame whose two copies are both held counts once,
// one whose other copy went out not at all.
func TestHeldRecordsCountWhatNeverWentOut(t *testing.T) {
	cfg := Config{Dup: 0.3, Reorder: 0.2, Drop: 0.05, Delay: 40 * time.Millisecond, DelayProb: 0.5, Seed: 9}
	out := map[uint64]bool{}
	cnt := &Counters{}
	l := NewLink(cfg, 1, func(_ int, f *wire.Frame) { out[f.Seq] = true }, cnt)
	size := map[uint64]int64{}
	now := time.Now()
	copiesCounted := false // some check saw a duplicate that counting every held copy gets wrong
	check := func(when string) {
		t.Helper()
		var want, naive int64
		for seq, n := range size {
			if !out[seq] {
				want += n
			}
		}
		want -= cnt.RecordsDropped.Load()
		if l.held != nil {
			naive += int64(len(l.held.f.Records))
		}
		for _, d := range l.delayed {
			naive += int64(len(d.f.Records))
		}
		if got := l.HeldRecords(); got != want {
			t.Fatalf("%s: HeldRecords %d, want %d (records of frames not dropped and never out)", when, got, want)
		}
		copiesCounted = copiesCounted || naive != want
	}
	seq := uint64(0)
	for round := range 40 {
		for range 50 {
			seq++
			n := 1 + int(seq%5)
			size[seq] = int64(n)
			l.Send(0, &wire.Frame{Kind: wire.KindData, Seq: seq, Records: make([]wire.Record, n)})
		}
		check("after sending")
		now = now.Add(time.Duration(round%3) * 10 * time.Millisecond)
		l.Poll(now)
		check("after a poll")
	}
	for l.Poll(now.Add(time.Hour)) > 0 {
	}
	check("at the end")
	if l.HeldRecords() != 0 || len(l.dups) != 0 {
		t.Errorf("after every frame went out: HeldRecords %d, %d duplicates remembered", l.HeldRecords(), len(l.dups))
	}
	if !copiesCounted {
		t.Fatal("no check held a duplicated frame twice or after its other copy went out: the test proves nothing")
	}
}
