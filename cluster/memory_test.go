package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
)

func TestMemoryKillRemovesAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	m, err := cluster.NewMemoryMembers(fast)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"w1", "w2"} {
		if err := m.Join(ctx, cluster.Member{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	waitSet(t, ch, "w1 w2")
	killed := time.Now()
	if err := m.Kill("w1"); err != nil {
		t.Fatal(err)
	}
	waitSet(t, ch, "w2")
	if took := time.Since(killed); took > fast.HeartbeatEvery {
		t.Fatalf("the watch saw w1 die %v after Kill, want at once", took)
	}
	select {
	case set := <-ch:
		t.Fatalf("after Kill the set changed to %+v: a heartbeat of the killed member came", set)
	case <-time.After(2 * fast.HeartbeatEvery):
	}
	if err := m.Kill("w1"); err == nil || !strings.Contains(err.Error(), "not kept alive") {
		t.Fatalf("a second Kill returned %v, want an error", err)
	}
	if err := m.Join(ctx, cluster.Member{Name: "w1"}); err != nil {
		t.Fatalf("Join of a killed member's name: %v", err)
	}
	waitSet(t, ch, "w1 w2")
}

// waitSet waits for the set of names, space-separated.
func waitSet(t *testing.T, ch <-chan []cluster.Member, want string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case set := <-ch:
			var names []string
			for _, m := range set {
				names = append(names, m.Name)
			}
			if strings.Join(names, " ") == want {
				return
			}
		case <-timeout:
			t.Fatalf("the watch did not send [%s]", want)
		}
	}
}

func TestMemoryMemberLostToAnotherJoin(t *testing.T) {
	defer goleak.VerifyNone(t)
	lost := make(chan error, 1)
	cfg := fast
	cfg.OnLost = func(m cluster.Member, err error) { lost <- err }
	m, err := cluster.NewMemoryMembers(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Join(ctx, cluster.Member{Name: "w1", PID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause("w1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fast.DeadAfter+time.Second, "w1 to expire", func() bool {
		members, err := m.List(ctx)
		return err == nil && len(members) == 0
	})
	// A later Join takes the expired name, as another process could.
	if err := m.Join(ctx, cluster.Member{Name: "w1", PID: 2}); err != nil {
		t.Fatalf("Join of the expired name: %v", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, cluster.ErrNameTaken) {
			t.Fatalf("OnLost got %v, want ErrNameTaken", err)
		}
	case <-time.After(time.Second):
		t.Fatalf("the first w1 was not told it lost its name")
	}
	time.Sleep(2 * fast.HeartbeatEvery)
	members, err := m.List(ctx)
	if err != nil || len(members) != 1 || members[0].PID != 2 {
		t.Fatalf("List = %+v, %v; want the second w1 only", members, err)
	}
}

// TestLeaveAfterJoinContextEnded: a member whose Join context ended is
// still removed by Leave while its entry lives.
func TestLeaveAfterJoinContextEnded(t *testing.T) {
	defer goleak.VerifyNone(t)
	m, err := cluster.NewMemoryMembers(fast)
	if err != nil {
		t.Fatal(err)
	}
	jctx, stop := context.WithCancel(context.Background())
	if err := m.Join(jctx, cluster.Member{Name: "w1", PID: 1}); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := m.Leave(context.Background(), "w1"); err != nil {
		t.Fatal(err)
	}
	if members, _ := m.List(context.Background()); len(members) != 0 {
		t.Fatalf("Leave after the Join's context ended left %+v", members)
	}
}

func TestMembersConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  cluster.MembersConfig
		want string // "" for valid
	}{
		{cluster.MembersConfig{}, ""},
		{cluster.DefaultMembersConfig(), ""},
		{cluster.MembersConfig{HeartbeatEvery: 300 * time.Millisecond, DeadAfter: time.Second}, ""},
		{cluster.MembersConfig{HeartbeatEvery: 2 * time.Second}, "twice"}, // DeadAfter defaults to 3 s
		{cluster.MembersConfig{HeartbeatEvery: time.Second, DeadAfter: 1500 * time.Millisecond}, "twice"},
		{cluster.MembersConfig{HeartbeatEvery: 10 * time.Millisecond, DeadAfter: 50 * time.Millisecond}, "100ms"},
		{cluster.MembersConfig{HeartbeatEvery: -time.Second}, "negative"},
		{cluster.MembersConfig{DeadAfter: -time.Second}, "negative"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "cluster: ")):
			t.Errorf("%+v: %v, want a cluster: error about %q", c.cfg, err, c.want)
		}
	}
	if d := cluster.DefaultMembersConfig(); d.HeartbeatEvery != time.Second || d.DeadAfter != 3*time.Second {
		t.Fatalf("defaults %+v, want 1 s and 3 s", d)
	}
	if _, err := cluster.NewMemoryMembers(cluster.MembersConfig{HeartbeatEvery: time.Second, DeadAfter: time.Second}); err == nil {
		t.Fatalf("NewMemoryMembers accepted an invalid config")
	}
	if _, err := cluster.NewMemoryElector(cluster.MembersConfig{HeartbeatEvery: time.Second, DeadAfter: time.Second}); err == nil {
		t.Fatalf("NewMemoryElector accepted an invalid config")
	}
}

// TestMemoryClusterHoldsRunningMembers: with HoldMembers, a member whose
// heartbeats stop (as a busy process's come late) stays listed while it
// is reported running, and expires once it is not; a member not held
// expires by its TTL alone.
func TestMemoryClusterHoldsRunningMembers(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, err := cluster.NewMemoryCluster(fast)
	if err != nil {
		t.Fatal(err)
	}
	var running atomic.Bool
	running.Store(true)
	c.HoldMembers(func(name string) bool { return name == "held" && running.Load() })
	co, err := c.Open(fast)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range []string{"held", "free"} {
		if err := co.Members.Join(ctx, cluster.Member{Name: name}); err != nil {
			t.Fatal(err)
		}
		if err := co.Members.(*cluster.MemoryMembers).Pause(name); err != nil {
			t.Fatal(err)
		}
	}
	names := func() string {
		ms, err := co.Members.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	waitFor(t, fast.DeadAfter+time.Second, "the member not held to expire", func() bool { return names() == "held" })
	time.Sleep(3 * fast.DeadAfter)
	if got := names(); got != "held" {
		t.Fatalf("after three times DeadAfter without a heartbeat the members are [%s]; want the held one", got)
	}
	running.Store(false)
	stopped := time.Now()
	waitFor(t, fast.DeadAfter, "the released member to expire", func() bool { return names() == "" })
	t.Logf("expired %v after its release", time.Since(stopped).Round(time.Millisecond))
}
