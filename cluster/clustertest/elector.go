package clustertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

type electorOpener = func(t *testing.T, cfg cluster.MembersConfig) cluster.Elector

// RunElector runs every Elector case; open is called once per case with
// Timing and must return an Elector without leaders. The campaigners of a
// case share the Elector it returns, as workers share a bucket.
//
// The guarantee tested is the one cluster.Elector documents: a leader cut
// off from the store (Pause) has its leaderCtx cancelled before another
// campaigner's onLead begins; a leader that was stopped (Freeze) cannot do
// that, and learns that it lost as soon as it runs again.
func RunElector(t *testing.T, open func(t *testing.T, cfg cluster.MembersConfig) cluster.Elector) {
	cases(t, open, []namedCase[electorOpener]{
		{"NoLeaderIsNotFound", noLeader},
		{"SoleCampaignerLeadsAndResigns", soleCampaigner},
		{"AtMostOneLeaderAtATime", oneLeaderAtATime},
		{"OnLeadReturningResigns", onLeadReturns},
		{"TopologiesAreIndependent", independentTopologies},
		{"PausedLeaderGivesUpBeforeASuccessorLeads", pausedLeader},
		{"FrozenLeaderLearnsOnWake", frozenLeader},
		{"DeposedLeaderMakesWayAtOnce", deposedLeader},
		{"BadArgumentsRefused", badCampaigns},
	})
}

// campaigner is a running Campaign.
type campaigner struct {
	member string
	cancel context.CancelFunc
	done   chan struct{} // closed when Campaign has returned
	err    error         // what Campaign returned, once done
	led    chan context.Context
}

// campaign starts member's Campaign for topology; each time it leads, its
// leaderCtx goes to c.led, and onLead (if not nil) runs, else it waits for
// leaderCtx to end. The campaign stops at the end of the case.
func campaign(t *testing.T, e cluster.Elector, topology, member string, onLead func(ctx context.Context)) *campaigner {
	ctx, cancel := context.WithCancel(context.Background())
	c := &campaigner{member: member, cancel: cancel, done: make(chan struct{}), led: make(chan context.Context, 16)}
	go func() {
		defer close(c.done)
		c.err = e.Campaign(ctx, topology, member, func(ctx context.Context) {
			c.led <- ctx
			if onLead != nil {
				onLead(ctx)
				return
			}
			<-ctx.Done()
		})
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *campaigner) stop() {
	c.cancel()
	<-c.done
}

// leads waits for c's next leadership and returns its leaderCtx.
func (c *campaigner) leads(t *testing.T, timeout time.Duration) (context.Context, time.Duration) {
	t.Helper()
	return receive(t, c.led, timeout, c.member+" leading", func(context.Context) bool { return true })
}

// ended waits for ctx to end and returns how long that took.
func ended(t *testing.T, ctx context.Context, timeout time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ctx.Done():
		return time.Since(start)
	case <-time.After(timeout):
		t.Fatalf("%s: the leaderCtx was not cancelled within %v", what, timeout)
		return 0
	}
}

func leaderOf(t *testing.T, e cluster.Elector, topology string) string {
	t.Helper()
	member, err := e.Leader(context.Background(), topology)
	if err != nil {
		t.Fatalf("Leader(%s): %v", topology, err)
	}
	return member
}

// electionTimeout bounds a first election, which needs no expiry.
const electionTimeout = 5 * time.Second

func noLeader(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	if member, err := e.Leader(context.Background(), "wc"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Leader of a topology nobody campaigns for = %q, %v; want ErrNotFound", member, err)
	}
}

func soleCampaigner(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	w1 := campaign(t, e, "wc", "w1", nil)
	lctx, _ := w1.leads(t, electionTimeout)
	if got := leaderOf(t, e, "wc"); got != "w1" {
		t.Fatalf("Leader = %s, want w1", got)
	}
	// Leading lasts beyond a lease: the renewals work.
	select {
	case <-lctx.Done():
		t.Fatalf("the sole leader lost its leadership within 2 DeadAfter")
	case <-time.After(2 * Timing.DeadAfter):
	}
	w1.stop()
	if w1.err != nil {
		t.Fatalf("Campaign returned %v when its context ended, want nil", w1.err)
	}
	if lctx.Err() == nil {
		t.Fatalf("Campaign returned with its leaderCtx live")
	}
	// It resigned: nobody leads, without waiting for an expiry.
	if member, err := e.Leader(context.Background(), "wc"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("after the leader's Campaign returned, Leader = %q, %v; want ErrNotFound at once", member, err)
	}
}

// leaderCount fails the test if two onLeads ever run at once.
type leaderCount struct {
	t       *testing.T
	mu      sync.Mutex
	running int
}

func (l *leaderCount) onLead(ctx context.Context) {
	l.mu.Lock()
	l.running++
	if l.running > 1 {
		l.t.Errorf("%d leaders at once", l.running)
	}
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
}

func oneLeaderAtATime(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	count := &leaderCount{t: t}
	all := map[string]*campaigner{}
	for _, m := range []string{"w1", "w2", "w3"} {
		all[m] = campaign(t, e, "wc", m, count.onLead)
	}
	// Each leader in turn resigns (its Campaign ends); another takes
	// over at once, without waiting for an expiry.
	for len(all) > 0 {
		leader, took := nextLeader(t, all, Timing.DeadAfter)
		if got := leaderOf(t, e, "wc"); got != leader.member {
			t.Fatalf("%s leads, but Leader says %s", leader.member, got)
		}
		t.Logf("%s leads after %v", leader.member, took)
		leader.stop()
		delete(all, leader.member)
	}
}

// nextLeader waits for one of cs to lead and returns it.
func nextLeader(t *testing.T, cs map[string]*campaigner, timeout time.Duration) (*campaigner, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := time.After(timeout)
	for {
		for _, c := range cs {
			select {
			case <-c.led:
				return c, time.Since(start)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("nobody led within %v", timeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func onLeadReturns(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	release := make(chan struct{})
	var once sync.Once
	w1 := campaign(t, e, "wc", "w1", func(ctx context.Context) {
		first := false
		once.Do(func() { first = true })
		if first {
			<-release // then return while leading
			return
		}
		<-ctx.Done()
	})
	w1.leads(t, electionTimeout)
	w2 := campaign(t, e, "wc", "w2", nil)
	time.Sleep(100 * time.Millisecond) // w2 is watching for a vacancy
	close(release)
	_, took := w2.leads(t, Timing.DeadAfter/2)
	t.Logf("w2 leads %v after w1's onLead returned", took)
}

func independentTopologies(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	a := campaign(t, e, "a", "w1", nil)
	b := campaign(t, e, "b", "w1", nil)
	a.leads(t, electionTimeout)
	b.leads(t, electionTimeout)
	if leaderOf(t, e, "a") != "w1" || leaderOf(t, e, "b") != "w1" {
		t.Fatalf("w1 should lead both topologies")
	}
	a.stop()
	if member, err := e.Leader(context.Background(), "b"); err != nil || member != "w1" {
		t.Fatalf("after w1 resigned a, Leader(b) = %q, %v; want w1", member, err)
	}
}

func pausedLeader(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	ctl, ok := e.(ElectorControl)
	if !ok {
		t.Skip("the Elector does not implement ElectorControl")
	}
	w1 := campaign(t, e, "wc", "w1", nil)
	ctx1, _ := w1.leads(t, electionTimeout)
	// w2 notes whether w1's leaderCtx had ended when w2 began to lead.
	w1Ended := make(chan bool, 16)
	w2 := campaign(t, e, "wc", "w2", func(ctx context.Context) {
		w1Ended <- ctx1.Err() != nil
		<-ctx.Done()
	})
	time.Sleep(100 * time.Millisecond)

	paused := time.Now()
	ctl.Pause("wc", "w1")
	ended(t, ctx1, Timing.DeadAfter, "w1 cut off")
	lost := time.Since(paused)
	ctx2, _ := w2.leads(t, Timing.DeadAfter+Granularity+Timing.HeartbeatEvery)
	t.Logf("w1, cut off, gave up %v after Pause; w2 leads %v after Pause", lost, time.Since(paused))
	if !<-w1Ended {
		t.Fatalf("w2's onLead began while w1's leaderCtx was live")
	}
	if got := leaderOf(t, e, "wc"); got != "w2" {
		t.Fatalf("Leader = %s, want w2", got)
	}

	ctl.Resume("wc", "w1")
	select {
	case <-w1.led:
		t.Fatalf("w1 led again while w2 leads")
	case <-ctx2.Done():
		t.Fatalf("w2 lost its leadership after w1 resumed")
	case <-time.After(2 * Timing.DeadAfter):
	}
}

func frozenLeader(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	ctl, ok := e.(ElectorControl)
	if !ok {
		t.Skip("the Elector does not implement ElectorControl")
	}
	w1 := campaign(t, e, "wc", "w1", nil)
	ctx1, _ := w1.leads(t, electionTimeout)
	w2 := campaign(t, e, "wc", "w2", nil)
	time.Sleep(100 * time.Millisecond)

	if err := cluster.LeaseValid(ctx1); err != nil {
		t.Fatalf("LeaseValid of the leader w1: %v", err)
	}
	ctl.Freeze("wc", "w1")
	ctx2, took := w2.leads(t, Timing.DeadAfter+Granularity+Timing.HeartbeatEvery)
	t.Logf("w2 leads %v after w1 froze; w1's leaderCtx cancelled by then: %v (a stopped process cannot cancel it)", took, ctx1.Err() != nil)
	// What a stopped leader checks first when it runs again, before its
	// renewal goroutine has had a chance to cancel its context.
	if err := cluster.LeaseValid(ctx1); err == nil {
		t.Fatalf("LeaseValid of the frozen w1 is nil while w2 leads")
	}
	if err := cluster.LeaseValid(ctx2); err != nil {
		t.Fatalf("LeaseValid of the new leader w2: %v", err)
	}

	ctl.Resume("wc", "w1")
	woke := ended(t, ctx1, Timing.HeartbeatEvery, "w1 woke past its lease")
	t.Logf("w1 gave up %v after it woke", woke)
	if got := leaderOf(t, e, "wc"); got != "w2" {
		t.Fatalf("Leader = %s after w1 woke, want w2", got)
	}
	select {
	case <-w1.led:
		t.Fatalf("w1 led again while w2 leads")
	case <-ctx2.Done():
		t.Fatalf("w2 lost its leadership after w1 woke")
	case <-time.After(2 * Timing.DeadAfter):
	}
}

func badCampaigns(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	wait := func(context.Context) {}
	for _, args := range [][2]string{{"", "w1"}, {"a.b", "w1"}, {"wc", ""}, {"wc", "a b"}, {"wc", "a*"}} {
		if err := e.Campaign(ctx, args[0], args[1], wait); err == nil {
			t.Errorf("Campaign(%q, %q) returned nil, want an error about the name", args[0], args[1])
		}
	}
	if err := e.Campaign(ctx, "wc", "w1", nil); err == nil {
		t.Errorf("Campaign without onLead returned nil, want an error")
	}
	if ctx.Err() != nil {
		t.Fatalf("refusing bad arguments took until the context ended")
	}
	if _, err := e.Leader(context.Background(), "a.b"); err == nil || errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Leader(a.b) = %v, want an error about the name", err)
	}
}

// deposedLeader: deposing a member that does not lead changes nothing;
// deposing the leader hands the lead to a waiting campaigner well before
// DeadAfter, and the deposed leader's leaderCtx ends.
func deposedLeader(t *testing.T, open electorOpener) {
	e := open(t, Timing)
	w1 := campaign(t, e, "wc", "w1", nil)
	ctx1, _ := w1.leads(t, electionTimeout)
	w2 := campaign(t, e, "wc", "w2", nil)
	time.Sleep(100 * time.Millisecond)
	if err := e.Depose(context.Background(), "wc", "w2"); err != nil {
		t.Fatalf("Depose of a member that does not lead: %v", err)
	}
	if got := leaderOf(t, e, "wc"); got != "w1" {
		t.Fatalf("Leader = %s after deposing w2, want w1", got)
	}
	start := time.Now()
	if err := e.Depose(context.Background(), "wc", "w1"); err != nil {
		t.Fatal(err)
	}
	_, took := w2.leads(t, Timing.DeadAfter)
	t.Logf("w2 leads %v after w1 was deposed", took)
	if took > Timing.DeadAfter/2 {
		t.Fatalf("w2 took %v to lead after w1 was deposed; it should not wait for the lease to expire", took)
	}
	ended(t, ctx1, Timing.DeadAfter, "the deposed w1's leaderCtx")
	if time.Since(start) > Timing.DeadAfter {
		t.Fatalf("deposing took %v", time.Since(start))
	}
}
