package clustertest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

type membersOpener = func(t *testing.T, cfg cluster.MembersConfig) cluster.Members

// RunMembers runs every Members case; open is called once per case with
// Timing and must return a Members with no member.
func RunMembers(t *testing.T, open func(t *testing.T, cfg cluster.MembersConfig) cluster.Members) {
	cases(t, open, []namedCase[membersOpener]{
		{"JoinListLeave", joinListLeave},
		{"NameTaken", nameTaken},
		{"ConcurrentJoinsOfOneName", concurrentJoins},
		{"InvalidNamesRefused", invalidMemberNames},
		{"WatchSendsTheSetAndItsChanges", watchMembers},
		{"LeaveRemovesAtOnce", leaveAtOnce},
		{"ExpiresWhenHeartbeatsStop", expiry},
		{"PausedMemberExpiresAndRejoins", pausedMember},
		{"RenewedFollowsTheHeartbeats", renewed},
	})
}

func sampleMember(name string, pid int) cluster.Member {
	return cluster.Member{
		Name:       name,
		Started:    time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC),
		Host:       "host-" + name,
		PID:        pid,
		Topologies: map[string]string{"wordcount": "f00d", "pageviews": "beef"},
		Version:    "v1.2.3",
	}
}

func join(t *testing.T, ctx context.Context, s cluster.Members, m cluster.Member) {
	t.Helper()
	if err := s.Join(ctx, m); err != nil {
		t.Fatalf("Join(%s): %v", m.Name, err)
	}
}

func leave(t *testing.T, s cluster.Members, name string) {
	t.Helper()
	if err := s.Leave(context.Background(), name); err != nil {
		t.Fatalf("Leave(%s): %v", name, err)
	}
}

func listMembers(t *testing.T, s cluster.Members) []cluster.Member {
	t.Helper()
	members, err := s.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return members
}

func names(members []cluster.Member) []string {
	out := make([]string, 0, len(members))
	for _, m := range members {
		out = append(out, m.Name)
	}
	return out
}

// sameMember compares what went in with what came out of a store: Started
// as an instant, since its location and monotonic reading do not survive
// encoding.
func sameMember(a, b cluster.Member) bool {
	if !a.Started.Equal(b.Started) {
		return false
	}
	a.Started, b.Started = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func joinListLeave(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	w1, w2 := sampleMember("w1", 11), sampleMember("w2", 22)
	join(t, ctx, s, w2)
	join(t, ctx, s, w1)
	got := listMembers(t, s)
	if len(got) != 2 || !sameMember(got[0], w1) || !sameMember(got[1], w2) {
		t.Fatalf("List = %+v, want w1 and w2 as joined, by name", got)
	}
	before := time.Now()
	join(t, ctx, s, cluster.Member{Name: "w3"})
	if got := listMembers(t, s); len(got) != 3 || got[2].Started.Before(before.Add(-time.Second)) || got[2].Started.After(time.Now()) {
		t.Fatalf("a member joined without Started lists as %+v; want Started set to the time of Join", got)
	}
	leave(t, s, "w1")
	if got := names(listMembers(t, s)); !slices.Equal(got, []string{"w2", "w3"}) {
		t.Fatalf("List after Leave(w1) = %v, want [w2 w3]", got)
	}
	leave(t, s, "w1")    // again
	leave(t, s, "never") // never joined
	leave(t, s, "w2")
	leave(t, s, "w3")
	if got := listMembers(t, s); len(got) != 0 {
		t.Fatalf("List after every Leave = %v", names(got))
	}
}

func nameTaken(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	join(t, ctx, s, sampleMember("w1", 1))
	err := s.Join(ctx, sampleMember("w1", 2))
	if !errors.Is(err, cluster.ErrNameTaken) {
		t.Fatalf("a second Join of a live name returned %v, want ErrNameTaken", err)
	}
	if !strings.Contains(err.Error(), "w1") {
		t.Errorf("the error does not name the member: %v", err)
	}
	if got := listMembers(t, s); len(got) != 1 || got[0].PID != 1 {
		t.Fatalf("after the refused Join, List = %+v, want the first w1 only", got)
	}
	leave(t, s, "w1")
	join(t, ctx, s, sampleMember("w1", 2))
	if got := listMembers(t, s); len(got) != 1 || got[0].PID != 2 {
		t.Fatalf("after Leave and a new Join, List = %+v, want the second w1", got)
	}
	leave(t, s, "w1")
}

func concurrentJoins(t *testing.T, open membersOpener) {
	const n = 8
	s := open(t, Timing)
	ctx := background(t)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs <- s.Join(ctx, sampleMember("w1", i+1)) })
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, cluster.ErrNameTaken):
			t.Errorf("a concurrent Join returned %v, want nil or ErrNameTaken", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent Joins of one name succeeded, want exactly 1", won, n)
	}
	leave(t, s, "w1")
}

func invalidMemberNames(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	for _, name := range []string{"", "a.b", "a b", "a*", "a>", "a/b", "ä", "a\nb", "a=b"} {
		err := s.Join(ctx, cluster.Member{Name: name})
		if err == nil || errors.Is(err, cluster.ErrNameTaken) || !strings.HasPrefix(err.Error(), "cluster: ") {
			t.Errorf("Join(%q) = %v, want a cluster: error about the name", name, err)
		}
		if err := s.Leave(ctx, name); err == nil {
			t.Errorf("Leave(%q) succeeded, want an error about the name", name)
		}
	}
	if got := listMembers(t, s); len(got) != 0 {
		t.Fatalf("refused Joins listed %v", names(got))
	}
}

func watchMembers(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	empty, err := s.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, empty, 5*time.Second, "the initial empty set", func(set []cluster.Member) bool { return len(set) == 0 })

	join(t, ctx, s, sampleMember("w1", 1))
	ch, err := s.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := receive(t, ch, 5*time.Second, "the initial set", func([]cluster.Member) bool { return true })
	if len(first) != 1 || !sameMember(first[0], sampleMember("w1", 1)) {
		t.Fatalf("the first set is %+v, want w1 as joined", first)
	}
	join(t, ctx, s, sampleMember("w2", 2))
	if set, _ := receive(t, ch, 5*time.Second, "a set", func([]cluster.Member) bool { return true }); !slices.Equal(names(set), []string{"w1", "w2"}) {
		t.Fatalf("after Join(w2) the watch sent %v, want [w1 w2]", names(set))
	}
	quiet(t, ch, 3*Timing.HeartbeatEvery, "heartbeats do not change the set")
	leave(t, s, "w1")
	if set, _ := receive(t, ch, 5*time.Second, "a set", func([]cluster.Member) bool { return true }); !slices.Equal(names(set), []string{"w2"}) {
		t.Fatalf("after Leave(w1) the watch sent %v, want [w2]", names(set))
	}
	stop()
	closes(t, ch, 5*time.Second)
	closes(t, empty, 5*time.Second)
	leave(t, s, "w2")
}

func leaveAtOnce(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	ch, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	join(t, ctx, s, sampleMember("w1", 1))
	receive(t, ch, 5*time.Second, "a set with w1", func(set []cluster.Member) bool { return len(set) == 1 })
	leave(t, s, "w1")
	_, took := receive(t, ch, Timing.DeadAfter/2, "the set without w1, well before w1 could expire", func(set []cluster.Member) bool { return len(set) == 0 })
	t.Logf("the watch saw w1 leave %v after Leave", took)
	// A heartbeat that was under way must not bring it back.
	quiet(t, ch, 2*Timing.HeartbeatEvery, "nothing may change after Leave")
	if got := listMembers(t, s); len(got) != 0 {
		t.Fatalf("after Leave, List = %v", names(got))
	}
}

func expiry(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctx := background(t)
	ch, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jctx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	join(t, jctx, s, sampleMember("w1", 1))
	receive(t, ch, 5*time.Second, "a set with w1", func(set []cluster.Member) bool { return len(set) == 1 })
	quiet(t, ch, 2*Timing.DeadAfter, "heartbeats keep a member alive")

	stopHeartbeats()
	_, took := receive(t, ch, Timing.DeadAfter+Granularity, "the set without w1", func(set []cluster.Member) bool { return len(set) == 0 })
	t.Logf("w1 expired %v after its heartbeats stopped (DeadAfter %v, heartbeats every %v)", took, Timing.DeadAfter, Timing.HeartbeatEvery)
	// The last heartbeat came at most HeartbeatEvery before the stop.
	if early := Timing.DeadAfter - Timing.HeartbeatEvery - 50*time.Millisecond; took < early {
		t.Fatalf("w1 expired %v after its heartbeats stopped, before the %v its last heartbeat guarantees", took, early)
	}
	if got := listMembers(t, s); len(got) != 0 {
		t.Fatalf("List after the expiry = %v", names(got))
	}
	join(t, ctx, s, sampleMember("w1", 2)) // the name is free again
	leave(t, s, "w1")
}

// renewer is what the stores of this project offer besides Members: when
// this process last renewed a member's entry (local mode's status shows it).
type renewer interface {
	Renewed(name string) (time.Time, bool)
}

func renewed(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	r, ok := s.(renewer)
	if !ok {
		t.Skipf("%T does not report renewals", s)
	}
	if _, ok := r.Renewed("w1"); ok {
		t.Fatal("Renewed reports a member that never joined")
	}
	ctx := background(t)
	jctx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	before := time.Now()
	join(t, jctx, s, sampleMember("w1", 1))
	first, ok := r.Renewed("w1")
	if !ok || first.Before(before) {
		t.Fatalf("right after Join, Renewed = %v, %v; want a time after %v", first, ok, before)
	}
	// Renewals move it on while the heartbeats go on.
	deadline := time.Now().Add(5 * Timing.HeartbeatEvery)
	for {
		if at, _ := r.Renewed("w1"); at.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Renewed stayed at %v for %v with heartbeats every %v", first, 5*Timing.HeartbeatEvery, Timing.HeartbeatEvery)
		}
		time.Sleep(Timing.HeartbeatEvery / 5)
	}
	// Once they stop it stays where it was.
	stopHeartbeats()
	time.Sleep(Timing.HeartbeatEvery / 2) // a renewal in progress lands
	last, _ := r.Renewed("w1")
	time.Sleep(2 * Timing.HeartbeatEvery)
	if at, _ := r.Renewed("w1"); !at.Equal(last) {
		t.Fatalf("Renewed moved from %v to %v after the heartbeats stopped", last, at)
	}
	leave(t, s, "w1")
	if at, ok := r.Renewed("w1"); ok {
		t.Fatalf("after Leave, Renewed = %v, true; want false", at)
	}
}

func pausedMember(t *testing.T, open membersOpener) {
	s := open(t, Timing)
	ctl, ok := s.(MembersControl)
	if !ok {
		t.Skip("the Members does not implement MembersControl")
	}
	ctx := background(t)
	ch, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	join(t, ctx, s, sampleMember("w1", 1))
	receive(t, ch, 5*time.Second, "a set with w1", func(set []cluster.Member) bool { return len(set) == 1 })
	if err := ctl.Pause("w1"); err != nil {
		t.Fatal(err)
	}
	_, took := receive(t, ch, Timing.DeadAfter+Granularity, "the set without the paused w1", func(set []cluster.Member) bool { return len(set) == 0 })
	t.Logf("paused w1 expired %v after Pause", took)
	if err := ctl.Resume("w1"); err != nil {
		t.Fatal(err)
	}
	set, took := receive(t, ch, Timing.HeartbeatEvery+2*time.Second, "w1 back", func(set []cluster.Member) bool { return len(set) == 1 })
	t.Logf("resumed w1 joined again %v after Resume", took)
	if !sameMember(set[0], sampleMember("w1", 1)) {
		t.Fatalf("w1 came back as %+v, want it as it joined", set[0])
	}
	if err := ctl.Pause("nobody"); err == nil {
		t.Errorf("Pause of a member never joined succeeded, want an error")
	}
	leave(t, s, "w1")
	if err := ctl.Resume("w1"); err == nil {
		t.Errorf("Resume of a member that left succeeded, want an error")
	}
}
