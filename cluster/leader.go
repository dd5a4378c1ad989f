package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Elector elects one leader per topology among the workers that campaign.
//
// The guarantee: a leader that keeps running gives up before anyone else
// can win. Its lease is the key's TTL (DeadAfter) counted from when it sent
// its last successful renewal, which is before the server stored it, less a
// margin of a quarter of DeadAfter; when the lease runs out without a
// renewal, its leaderCtx is cancelled, and the key cannot expire on the
// server, which is what lets another campaigner win, until the margin
// later. A renewal refused by compare-and-set (someone deleted the key) also
// cancels leaderCtx at once. A leader whose process was stopped (SIGSTOP, a
// long GC pause, a suspended VM) cannot cancel anything while it is
// stopped, so another may lead meanwhile; when it runs again it checks its
// lease before it does anything else and cancels leaderCtx, so it learns
// that it lost at the latest at its next renewal. What its onLead did
// meanwhile is fenced by the compare-and-set of Generations.Next: a stale
// leader's write of a generation fails once the new leader has written one.
// The guarantee rests on the clocks of the worker and the server running at
// the same rate, within the margin.
type Elector interface {
	// Campaign keeps trying to become topology's leader as member until ctx
	// ends. When it wins, it calls onLead(leaderCtx) in a goroutine of its
	// own, and cancels leaderCtx when the leadership is lost (its lease
	// runs out, a renewal fails, or ctx ends). onLead must return once
	// leaderCtx is done: Campaign waits for it before it campaigns again,
	// so one campaigner never runs two onLeads at once, and before it
	// resigns, so a successor never starts while onLead still runs. If
	// onLead returns while it leads, Campaign resigns and campaigns again
	// after HeartbeatEvery. Campaign returns nil when ctx ends, and an
	// error only for arguments it refuses or a watch it cannot start.
	Campaign(ctx context.Context, topology, member string, onLead func(ctx context.Context)) error
	// Leader returns the member that leads topology, or ErrNotFound. A
	// leader that died is reported until its lease expires on the server.
	Leader(ctx context.Context, topology string) (string, error)
	// Depose ends member's leadership of topology if member still holds
	// it, so that a campaigner wins at once instead of after DeadAfter.
	// A caller deposes a leader it knows to be gone (its process's NATS
	// connection closed). A deposed leader that still runs learns it from
	// the deletion or at its next renewal, whose compare-and-set fails,
	// and its leaderCtx ends. Deposing a member that does not lead is not
	// an error.
	Depose(ctx context.Context, topology, member string) error
}

// KVElector is an Elector in the JetStream KV bucket ackflow_leaders, one
// key per topology with a TTL of DeadAfter. A campaigner wins with Create,
// which succeeds only when the key is absent (or expired); the leader
// renews with Update on its revision every HeartbeatEvery; the others watch
// the key and try Create again when it is deleted or expires.
type KVElector struct {
	*elector
}

// NewKVElector opens the leaders bucket, creating it or updating it to
// cfg's TTL. It uses cfg's timing only: a leader renews like a member
// heartbeats and is dead when a member would be. The caller keeps
// ownership of js and its connection.
func NewKVElector(ctx context.Context, js jetstream.JetStream, cfg MembersConfig, opts ...Option) (*KVElector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	b, err := openKVBucket(ctx, js, ttlBucketConfig(LeadersBucket, "ackflow topology leaders", cfg.DeadAfter), opts)
	if err != nil {
		return nil, err
	}
	return &KVElector{newElector(b, cfg)}, nil
}

// MemoryElector is an Elector in memory, for local mode and tests. Its
// leases expire as KV keys do.
type MemoryElector struct {
	*elector
}

// NewMemoryElector returns a MemoryElector with cfg's timing.
func NewMemoryElector(cfg MembersConfig) (*MemoryElector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &MemoryElector{newElector(newMemBucket(cfg.DeadAfter), cfg)}, nil
}

// elector is an Elector over a bucket with a TTL of cfg.DeadAfter.
type elector struct {
	b     bucket
	cfg   MembersConfig
	holds holds
}

func newElector(b bucket, cfg MembersConfig) *elector {
	return &elector{b: b, cfg: cfg, holds: holds{m: map[string]*hold{}}}
}

// leaderRecord is the value of a leader's key.
type leaderRecord struct {
	Member string    `json:"member"`
	Since  time.Time `json:"since"`
}

func (e *elector) Campaign(ctx context.Context, topology, member string, onLead func(ctx context.Context)) error {
	if err := checkName("topology", topology); err != nil {
		return err
	}
	if err := checkName("member", member); err != nil {
		return err
	}
	if onLead == nil {
		return fmt.Errorf("cluster: campaign of %s for topology %s without an onLead function; pass the function that leads", member, topology)
	}
	value, err := json.Marshal(leaderRecord{Member: member, Since: time.Now()})
	if err != nil {
		return fmt.Errorf("cluster: leader record of %s cannot be encoded: %w", member, err)
	}
	// The watch outlives every step of the campaign, so that no deletion
	// of the key falls between two watches.
	events, err := e.b.watch(ctx, topology)
	if err != nil {
		return fmt.Errorf("cluster: cannot watch the leader of topology %s in %s: %w; check the NATS connection and retry", topology, e.b.where(), err)
	}
	c := &campaign{e: e, key: topology, hold: holdKey(topology, member), value: value, events: events, onLead: onLead}
	c.run(ctx)
	return nil
}

func (e *elector) Leader(ctx context.Context, topology string) (string, error) {
	if err := checkName("topology", topology); err != nil {
		return "", err
	}
	en, err := e.b.get(ctx, topology)
	if errors.Is(err, errNoKey) {
		return "", fmt.Errorf("%w: topology %s has no leader now; one is elected as soon as a worker campaigns, within %v of the last leader's death", ErrNotFound, topology, e.cfg.DeadAfter)
	}
	if err != nil {
		return "", fmt.Errorf("cluster: cannot read the leader of topology %s in %s: %w; check the NATS connection and retry", topology, e.b.where(), err)
	}
	var r leaderRecord
	if err := json.Unmarshal(en.value, &r); err != nil {
		return "", fmt.Errorf("cluster: entry %s in %s is not a leader record: %w; delete it (a campaigner then wins)", topology, e.b.where(), err)
	}
	return r.Member, nil
}

func (e *elector) Depose(ctx context.Context, topology, member string) error {
	if err := checkName("topology", topology); err != nil {
		return err
	}
	en, err := e.b.get(ctx, topology)
	if errors.Is(err, errNoKey) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: cannot read the leader of topology %s in %s: %w", topology, e.b.where(), err)
	}
	var r leaderRecord
	if json.Unmarshal(en.value, &r) == nil && r.Member != member {
		return nil
	}
	err = e.b.delete(ctx, topology, en.rev)
	if err != nil && !errors.Is(err, errRevMismatch) && !errors.Is(err, errNoKey) {
		return fmt.Errorf("cluster: cannot depose %s as leader of topology %s in %s: %w", member, topology, e.b.where(), err)
	}
	return nil
}

// lease is how long a leader leads after sending a renewal that succeeds:
// the key's TTL less a margin, so that it gives up before the key can
// expire on the server. DeadAfter is at least twice HeartbeatEvery, so the
// lease spans at least one renewal and a half.
func (e *elector) lease() time.Duration { return e.cfg.DeadAfter - e.cfg.DeadAfter/4 }

// campaign is one run of Campaign.
type campaign struct {
	e      *elector
	key    string // the topology
	hold   string // its key in e.holds
	value  []byte
	events <-chan event // the key's changes; nil once the watch broke
	onLead func(ctx context.Context)
}

func (c *campaign) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.e.holds.wait(ctx, c.hold)
		if c.e.holds.cutOff(c.hold) {
			c.sleep(ctx)
			continue
		}
		sent := time.Now()
		rev, err := c.e.b.create(ctx, c.key, c.value)
		switch {
		case err == nil:
			if resigned := c.lead(ctx, rev, sent); resigned {
				c.sleep(ctx) // let another campaigner win
			}
		case errors.Is(err, errKeyExists):
			c.awaitVacancy(ctx)
		default:
			c.sleep(ctx) // the server is slow or away; try again
		}
	}
}

// awaitVacancy returns when the key is deleted or expires, or after
// HeartbeatEvery in case the watch missed it.
func (c *campaign) awaitVacancy(ctx context.Context) {
	t := time.NewTimer(c.e.cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case ev, ok := <-c.events:
			if !ok {
				c.events = nil
			} else if ev.deleted {
				return
			}
		}
	}
}

func (c *campaign) sleep(ctx context.Context) {
	t := time.NewTimer(c.e.cfg.HeartbeatEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lead runs onLead and renews the lease at rev, which was won by a request
// sent at sent, until the lease is lost, ctx ends or onLead returns; it
// returns once onLead has returned, and reports whether to let another
// campaigner win first: it resigned because onLead returned, or it was
// deposed.
func (c *campaign) lead(ctx context.Context, rev uint64, sent time.Time) (resigned bool) {
	l := &leaseState{rev: rev, deadline: sent.Add(c.e.lease())}
	// A copy: keep rewrites deadline while LeaseValid reads what until
	// points to.
	first := l.deadline
	l.until.Store(&first)
	leaderCtx, cancel := context.WithCancel(context.WithValue(ctx, leaseKey{}, &l.until))
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.onLead(leaderCtx)
	}()
	expiry := time.NewTimer(time.Until(l.deadline))
	defer expiry.Stop()
	tick := time.NewTicker(c.e.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			c.resign(ctx, l.rev)
			return false
		case <-done:
			c.resign(ctx, l.rev)
			return true
		case ev, ok := <-c.events:
			if !ok {
				c.events = nil
			} else if ev.deleted && ev.rev > l.rev {
				// The key was deleted (deposed, or by hand): let another
				// campaigner win before campaigning again.
				cancel()
				<-done
				return true
			}
			continue
		case <-expiry.C:
		case <-tick.C:
		}
		if !c.keep(ctx, l) {
			cancel()
			<-done
			return false
		}
		expiry.Reset(time.Until(l.deadline))
	}
}

// leaseState is the lease a leader holds: the key's revision it wrote last
// and when the lease runs out.
type leaseState struct {
	rev      uint64
	deadline time.Time
	until    atomic.Pointer[time.Time] // deadline, for LeaseValid
}

type leaseKey struct{}

// LeaseValid returns nil if the leadership whose onLead got ctx still
// holds: ctx is live and the lease has not run out by this process's
// clock. A leader checks it right before an action that must not happen
// twice (writing a checkpoint manifest): unlike ctx, which the renewal
// goroutine cancels, it is right even in the first instants after the
// process was stopped past its lease and runs again.
func LeaseValid(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cluster: the leadership ended: %w", err)
	}
	until, ok := ctx.Value(leaseKey{}).(*atomic.Pointer[time.Time])
	if !ok {
		return nil
	}
	if d := until.Load(); !time.Now().Before(*d) {
		return fmt.Errorf("cluster: the leader's lease ran out %v ago", time.Since(*d).Round(time.Millisecond))
	}
	return nil
}

// keep renews the lease unless it has run out, and reports whether this
// campaigner still leads. The lease is checked first, also after a freeze,
// so that a leader that was stopped past its lease gives up before it
// sends anything. A renewal that fails for another reason than a lost
// compare-and-set is tried again at the next tick while the lease lasts.
func (c *campaign) keep(ctx context.Context, l *leaseState) bool {
	c.e.holds.wait(ctx, c.hold)
	if !time.Now().Before(l.deadline) {
		return false
	}
	if c.e.holds.cutOff(c.hold) {
		return true
	}
	sent := time.Now()
	by := sent.Add(c.e.cfg.HeartbeatEvery)
	if l.deadline.Before(by) {
		by = l.deadline
	}
	rctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	rev, err := c.e.b.update(rctx, c.key, c.value, l.rev)
	if errors.Is(err, errRevMismatch) {
		cur, ok := c.ours(rctx)
		if !ok {
			return false
		}
		l.rev = cur
		rev, err = c.e.b.update(rctx, c.key, c.value, cur)
	}
	if errors.Is(err, errRevMismatch) {
		return false
	}
	if err == nil {
		l.rev, l.deadline = rev, sent.Add(c.e.lease())
		d := l.deadline
		l.until.Store(&d)
	}
	return true
}

// ours returns the key's revision if it still holds this campaign's value
// after a renewal was refused: it does when an earlier renewal succeeded
// but its reply was lost, and then the renewal is sent again at that
// revision. The value names the member and the instant its Campaign
// began, so no other campaigner writes the same bytes.
func (c *campaign) ours(ctx context.Context) (uint64, bool) {
	e, err := c.e.b.get(ctx, c.key)
	if err != nil || !bytes.Equal(e.value, c.value) {
		return 0, false
	}
	return e.rev, true
}

// resign deletes the key so that a successor need not wait for it to
// expire. It has a context of its own because ctx may be what ended the
// leadership; the delete is conditional on rev, so it never removes a
// successor's key, and it is best effort: the key expires anyway.
func (c *campaign) resign(ctx context.Context, rev uint64) {
	if c.e.holds.cutOff(c.hold) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.cfg.HeartbeatEvery)
	defer cancel()
	_ = c.e.b.delete(ctx, c.key, rev)
}

// holds are the fault-injection controls of an Elector's campaigns, by
// topology and member: a paused campaign is cut off from the bucket, a
// frozen one does not run at all.
type holds struct {
	mu sync.Mutex
	m  map[string]*hold
}

type hold struct {
	frozen bool
	thaw   chan struct{} // closed when a frozen campaign may run again
}

func holdKey(topology, member string) string { return topology + "/" + member }

// Pause cuts member's campaign for topology off from the bucket, as a
// network partition would: it sends nothing (no renewal, no Create, no
// resignation), but its clock runs, so as a leader it gives up when its
// lease runs out. For tests and fault injection.
func (e *elector) Pause(topology, member string) {
	e.holds.set(holdKey(topology, member), false)
}

// Freeze stops member's campaign for topology altogether, as SIGSTOP
// would: it neither renews nor notices that its lease ran out, until
// Resume. (onLead's goroutine runs on, which a stopped process would not
// do.) For tests and fault injection.
func (e *elector) Freeze(topology, member string) {
	e.holds.set(holdKey(topology, member), true)
}

// Resume lets a paused or frozen campaign run again.
func (e *elector) Resume(topology, member string) {
	e.holds.mu.Lock()
	defer e.holds.mu.Unlock()
	key := holdKey(topology, member)
	if h := e.holds.m[key]; h != nil {
		close(h.thaw)
		delete(e.holds.m, key)
	}
}

func (h *holds) set(key string, frozen bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.m[key]; old != nil {
		old.frozen = old.frozen || frozen
		return
	}
	h.m[key] = &hold{frozen: frozen, thaw: make(chan struct{})}
}

// cutOff reports whether the campaign may not reach the bucket.
func (h *holds) cutOff(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[key] != nil
}

// wait blocks while the campaign is frozen.
func (h *holds) wait(ctx context.Context, key string) {
	h.mu.Lock()
	var thaw chan struct{}
	if hd := h.m[key]; hd != nil && hd.frozen {
		thaw = hd.thaw
	}
	h.mu.Unlock()
	if thaw == nil {
		return
	}
	select {
	case <-thaw:
	case <-ctx.Done():
	}
}
