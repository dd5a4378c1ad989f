package workers

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBucketOfMatchesLog2: the histogram's bucket of a duration is
// floor(16 log2(µs)), as math.Log2 gives it, from 1 µs to the last bucket,
// and durations on either side of every bucket edge fall on the right
// side of it.
func TestBucketOfMatchesLog2(t *testing.T) {
	last := len(histogram{}.buckets) - 1
	want := func(d time.Duration) int {
		us := float64(d) / float64(time.Microsecond)
		if us < 1 {
			return 0
		}
		return min(int(math.Log2(us)*16), last)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		d := time.Duration(math.Exp2(rng.Float64() * 62))
		if got, w := bucketOf(d), want(d); got != w {
			t.Fatalf("bucketOf(%v) = %d, want %d", d, got, w)
		}
	}
	for i := 1; i < 40*16; i++ {
		edge := math.Exp2(float64(i)/16) * float64(time.Microsecond)
		below, above := time.Duration(edge*(1-1e-9)), time.Duration(edge*(1+1e-9))+1
		if got := bucketOf(below); got != i-1 {
			t.Fatalf("just below the edge of bucket %d (%v): bucket %d", i, below, got)
		}
		if got := bucketOf(above); got != i {
			t.Fatalf("just above the edge of bucket %d (%v): bucket %d", i, above, got)
		}
	}
	for d, w := range map[time.Duration]int{0: 0, -5: 0, 999: 0, time.Microsecond: 0, 2 * time.Microsecond: 16, math.MaxInt64: last} {
		if got := bucketOf(d); got != w {
			t.Errorf("bucketOf(%d) = %d, want %d", d, got, w)
		}
	}
}

// BenchmarkBucketOf: ns to find a completed tree's latency bucket.
func BenchmarkBucketOf(b *testing.B) {
	ds := make([]time.Duration, 1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range ds {
		ds[i] = time.Duration(math.Exp2(10 + rng.Float64()*20))
	}
	sum := 0
	for i := 0; b.Loop(); i++ {
		sum += bucketOf(ds[i%len(ds)])
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}
