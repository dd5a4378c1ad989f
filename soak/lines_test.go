//go:build soak

package soak

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ackflow/ackflow/examples/wordcount"
	"github.com/ackflow/ackflow/topology"
)

// A soak at half of what word count sustains reads tens of millions of
// lines; a file of them would take gigabytes. The soak reads generated
// lines instead: line k is a function of k alone, so the spout can seek to
// any line after a crash (checkpoints need that) and the oracle counts the
// same lines again afterwards.

// vocabulary is 5000 made-up words, as wordcount.RandomText makes them.
var vocabulary = func() []string {
	rng := rand.New(rand.NewPCG(11, 1))
	v := make([]string, 5000)
	for i := range v {
		var b strings.Builder
		for range 2 + rng.IntN(8) {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		v[i] = b.String()
	}
	return v
}()

// line appends the words of line k to words and returns the line: 0 to 14
// words, the smaller indices more often (a square skew rather than Zipf:
// a Zipf generator per line would cost more than the runtime spends on a
// record), one in ten upper-cased, separated by spaces and punctuation.
func line(k uint64, words []string) (string, []string) {
	rng := rand.New(rand.NewPCG(k, 0x5eed))
	var b strings.Builder
	for j := range rng.IntN(15) {
		u := rng.Float64()
		w := vocabulary[int(u*u*float64(len(vocabulary)))]
		words = append(words, w)
		if j > 0 {
			b.WriteString([]string{" ", ", ", " -- ", ". "}[rng.IntN(4)])
		}
		if rng.IntN(10) == 0 {
			w = strings.ToUpper(w)
		}
		b.WriteString(w)
	}
	return b.String(), words
}

// oracle counts the words of lines [0, n).
func oracle(n uint64) map[string]int64 {
	counts := map[string]int64{}
	var words []string
	for k := range n {
		_, words = line(k, words[:0])
		for _, w := range words {
			counts[w]++
		}
	}
	return counts
}

// generated is the spout: lines [0, n), paced at rate lines a second (0:
// as fast as flow control allows), or until dur when n is 0.
type generated struct {
	n     uint64
	rate  float64
	dur   time.Duration
	next  uint64
	start time.Time
	from  uint64 // the line the pacing counts from (after a Seek)
	out   topology.SpoutCollector
	words []string
}

func (g *generated) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	g.out, g.start = out, time.Now()
	return nil
}

func (g *generated) Next(context.Context) error {
	if g.n > 0 && g.next >= g.n || g.n == 0 && time.Since(g.start) >= g.dur {
		return topology.ErrExhausted
	}
	budget := uint64(256)
	if g.rate > 0 {
		due := g.from + uint64(g.rate*time.Since(g.start).Seconds())
		budget = min(budget, due-min(due, g.next))
	}
	for ; budget > 0 && (g.n == 0 || g.next < g.n); budget-- {
		var l string
		l, g.words = line(g.next, g.words[:0])
		g.out.Emit(topology.MsgID{Offset: int64(g.next)}, topology.Values{l})
		g.next++
	}
	return nil
}

func (g *generated) Position() ([]byte, error) { return binary.AppendUvarint(nil, g.next), nil }

func (g *generated) Seek(pos []byte) error {
	k, n := binary.Uvarint(pos)
	if n <= 0 {
		return errors.New("soak: not a position of the generated lines")
	}
	g.next, g.from, g.start = k, k, time.Now()
	return nil
}

func (g *generated) Ack(topology.MsgID)  {}
func (g *generated) Fail(topology.MsgID) {}
func (g *generated) Close() error        { return nil }

// generatedJob is word count over the generated lines.
func generatedJob(n uint64, rate float64, dur time.Duration) (*wordcount.Job, error) {
	return wordcount.New(wordcount.Config{Source: func() topology.Spout { return &generated{n: n, rate: rate, dur: dur} }})
}
