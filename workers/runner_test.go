package workers

import (
	"context"
	"testing"
	"time"
)

// TestJoinEndsWhenANewerGenerationIsOut: the context of a join of
// generation 3 lives while 3 is the newest generation seen, ends as soon
// as a newer one is, and ends when the join returns.
func TestJoinEndsWhenANewerGenerationIsOut(t *testing.T) {
	r := &runner{}
	r.newest.Store(3)
	ctx, joined := r.untilNewer(context.Background(), 3)
	defer joined()
	select {
	case <-ctx.Done():
		t.Fatal("the join's context ended while its generation is the newest")
	case <-time.After(200 * time.Millisecond):
	}
	r.newest.Store(4)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the join's context lives on though generation 4 is out")
	}
	ctx, joined = r.untilNewer(context.Background(), 4)
	joined()
	if ctx.Err() == nil {
		t.Fatal("the join's context lives on after the join returned")
	}
}
