package wordcount

import (
	"bufio"
	"io"
	"math/rand/v2"
	"strings"
)

// RandomText writes lines of random text to w and returns how often each
// word occurs in it: the oracle a test or benchmark compares the counts
// with. Words come from a vocabulary of 5000 made-up words with a Zipf
// distribution (a few very common, most rare), separated by spaces and
// punctuation, one in ten upper-cased; a line has 0 to 14 words. The same
// seed writes the same text.
func RandomText(w io.Writer, lines int, seed uint64) (map[string]int64, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	vocab := make([]string, 5000)
	for i := range vocab {
		n := 2 + rng.IntN(8)
		var b strings.Builder
		for j := 0; j < n; j++ {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		vocab[i] = b.String()
	}
	zipf := rand.NewZipf(rng, 1.2, 1, uint64(len(vocab)-1))
	oracle := map[string]int64{}
	bw := bufio.NewWriter(w)
	for i := 0; i < lines; i++ {
		n := rng.IntN(15)
		for j := 0; j < n; j++ {
			word := vocab[zipf.Uint64()]
			if j > 0 {
				bw.WriteString([]string{" ", ", ", " -- ", ". "}[rng.IntN(4)])
			}
			if rng.IntN(10) == 0 {
				bw.WriteString(strings.ToUpper(word)) // the split lowercases
			} else {
				bw.WriteString(word)
			}
			oracle[word]++
		}
		bw.WriteByte('\n')
	}
	return oracle, bw.Flush()
}
