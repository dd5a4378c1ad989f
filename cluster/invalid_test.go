package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestWatchReportsEntriesThatAreNotMembers: an entry no worker wrote is
// left out of the members Watch sends and reported to OnInvalid once per
// write, while heartbeats of real members report nothing.
func TestWatchReportsEntriesThatAreNotMembers(t *testing.T) {
	var mu sync.Mutex
	var invalid []string
	cfg := MembersConfig{HeartbeatEvery: 50 * time.Millisecond, DeadAfter: time.Second, OnInvalid: func(key string) {
		mu.Lock()
		invalid = append(invalid, key)
		mu.Unlock()
	}}
	m, err := NewMemoryMembers(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Join(ctx, Member{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	rev, err := m.b.create(ctx, "intruder", []byte("garbage"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.b.create(ctx, "y", []byte(`{"name":"someone-else"}`)); err != nil {
		t.Fatal(err)
	}
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if len(first) != 1 || first[0].Name != "w1" {
		t.Fatalf("members %+v, want w1 alone", first)
	}
	if _, err := m.b.update(ctx, "intruder", []byte("more garbage"), rev); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several heartbeats of w1
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(invalid)
	if want := []string{"intruder", "intruder", "y"}; !slices.Equal(invalid, want) {
		t.Fatalf("OnInvalid got %q, want %q", invalid, want)
	}
}
