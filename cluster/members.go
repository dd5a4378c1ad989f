package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Member is a live worker process.
type Member struct {
	Name    string    `json:"name"`
	Started time.Time `json:"started"`
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	// Topologies maps each topology compiled into this worker's binary to
	// its fingerprint, so that a leader gives tasks only to workers that
	// have the same code.
	Topologies map[string]string `json:"topologies,omitempty"`
	Version    string            `json:"version,omitempty"`
}

// Members is the set of live workers. A process keeps one heartbeat per
// name: a later Join of a name whose entry expired replaces the earlier one
// (which is then lost), and Leave and the test controls act on the later.
type Members interface {
	// Join registers m and keeps it alive until ctx ends or Leave; Join
	// returns once m is registered. It refuses a name a live member has
	// (ErrNameTaken), so that two processes cannot both be "w1". When ctx
	// ends without Leave, the heartbeats stop and m expires after DeadAfter,
	// as if the worker had died.
	Join(ctx context.Context, m Member) error
	// Leave stops the heartbeats of name and removes it at once. A name
	// without an entry is not an error.
	Leave(ctx context.Context, name string) error
	// List returns the live members, by name.
	List(ctx context.Context) ([]Member, error)
	// Watch sends the live set, by name, every time it changes (and once at
	// the start) until ctx ends, then closes the channel. It closes it
	// earlier if the watch breaks (the NATS connection closed): a receiver
	// that sees it closed while ctx is live watches again.
	Watch(ctx context.Context) (<-chan []Member, error)
}

// MembersConfig is the cluster's timing of liveness. Every worker of a
// cluster must use the same: the KV bucket's TTL is DeadAfter as the last
// worker to open it set it. The leader election uses it too, so that a
// leader is taken for dead exactly when a member would be.
type MembersConfig struct {
	// HeartbeatEvery is how often a member renews its entry (default 1 s).
	HeartbeatEvery time.Duration
	// DeadAfter is how long an entry lives after its last renewal
	// (default 3 s): a worker whose heartbeats stop disappears this long
	// after the last one, plus the NATS server's expiry granularity. It is
	// at least twice HeartbeatEvery, so that one late heartbeat does not
	// kill a member.
	DeadAfter time.Duration
	// OnLost, if set, is called from the heartbeat goroutine when a member
	// that Join keeps alive is lost for good: its entry expired (the worker
	// was paused or cut off from NATS for longer than DeadAfter) and another
	// worker, or a later Join in this process, took its name meanwhile.
	// Its heartbeats have stopped; the worker should stop, as its tasks
	// belong to others now. err wraps ErrNameTaken. OnLost may call Leave,
	// which leaves the other worker's entry alone. A member whose entry
	// expired and whose name is still free is not lost: its next heartbeat
	// joins it again.
	OnLost func(m Member, err error)
	// OnInvalid, if set, is called from Watch's goroutine for every write
	// of an entry that is not a member's heartbeat (no ackflow program
	// wrote it): such an entry names no worker and is left out of the
	// members, and OnInvalid is where it gets logged and counted.
	OnInvalid func(key string)
}

// DefaultMembersConfig returns the default timing: heartbeats every
// second, dead after three.
func DefaultMembersConfig() MembersConfig {
	return MembersConfig{HeartbeatEvery: time.Second, DeadAfter: 3 * time.Second}
}

func (c *MembersConfig) setDefaults() {
	d := DefaultMembersConfig()
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = d.HeartbeatEvery
	}
	if c.DeadAfter == 0 {
		c.DeadAfter = d.DeadAfter
	}
}

// Validate returns an error if the timing cannot work. Zero fields stand
// for their defaults.
func (c MembersConfig) Validate() error {
	c.setDefaults()
	if c.HeartbeatEvery < 0 || c.DeadAfter < 0 {
		return fmt.Errorf("cluster: negative member timing (HeartbeatEvery %v, DeadAfter %v); use positive durations, or zero for the defaults", c.HeartbeatEvery, c.DeadAfter)
	}
	if c.DeadAfter < 2*c.HeartbeatEvery {
		return fmt.Errorf("cluster: DeadAfter %v is less than twice HeartbeatEvery %v, so one late heartbeat would kill a member; raise DeadAfter or heartbeat more often", c.DeadAfter, c.HeartbeatEvery)
	}
	if c.DeadAfter < 100*time.Millisecond {
		return fmt.Errorf("cluster: DeadAfter %v is shorter than the 100ms the NATS server allows as a TTL; raise it", c.DeadAfter)
	}
	return nil
}

// KVMembers is Members in the JetStream KV bucket ackflow_members, whose
// TTL is DeadAfter: a heartbeat renews a member's key, and a key whose
// heartbeats stopped expires, leaving a marker that watchers see.
type KVMembers struct {
	*memberSet
}

// NewKVMembers opens the members bucket, creating it or updating it to
// cfg's TTL. The caller keeps ownership of js and its connection.
func NewKVMembers(ctx context.Context, js jetstream.JetStream, cfg MembersConfig, opts ...Option) (*KVMembers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	b, err := openKVBucket(ctx, js, ttlBucketConfig(MembersBucket, "ackflow live workers", cfg.DeadAfter), opts)
	if err != nil {
		return nil, err
	}
	return &KVMembers{newMemberSet(b, cfg)}, nil
}

// MemoryMembers is Members in memory, for local mode and tests. Its entries
// expire as KV entries do, so a member whose heartbeats stop (Pause, or the
// end of Join's ctx) disappears after DeadAfter; Kill makes one die at
// once.
type MemoryMembers struct {
	*memberSet
	b *memBucket
}

// NewMemoryMembers returns an empty MemoryMembers with cfg's timing.
func NewMemoryMembers(cfg MembersConfig) (*MemoryMembers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	b := newMemBucket(cfg.DeadAfter)
	return &MemoryMembers{memberSet: newMemberSet(b, cfg), b: b}, nil
}

// Kill makes name die at once, as a process killed with SIGKILL whose
// absence is noticed without waiting for DeadAfter: its heartbeats stop and
// watchers see it gone.
func (m *MemoryMembers) Kill(name string) error {
	hb, err := m.live(name)
	if err != nil {
		return err
	}
	m.stopBeating(hb)
	<-hb.done
	m.b.expire(name)
	return nil
}

// memberSet is Members over a bucket; KVMembers and MemoryMembers are it
// over their buckets.
type memberSet struct {
	b   bucket
	cfg MembersConfig

	mu sync.Mutex
	// beats are the members joined in this process, until Leave or a later
	// Join of the name. One whose heartbeats ended (its ctx, or its loss)
	// stays, so that Leave knows what this process wrote.
	beats map[string]*heartbeat
}

// heartbeat is a member that Join keeps alive.
type heartbeat struct {
	member Member
	value  []byte
	stop   chan struct{} // closed to stop the heartbeats
	done   chan struct{} // closed when the heartbeat goroutine has returned
	paused atomic.Bool
	// renewed is when the entry was last written (unix nanos).
	renewed atomic.Int64
	rev     uint64 // written by the heartbeat goroutine only; read after done
	lost    error  // why stop was closed, if the member is lost; set before the close
}

func newMemberSet(b bucket, cfg MembersConfig) *memberSet {
	return &memberSet{b: b, cfg: cfg, beats: map[string]*heartbeat{}}
}

// Join creates m's entry, which fails if a live member has the name, then
// renews it from a goroutine that ends with ctx or Leave.
func (s *memberSet) Join(ctx context.Context, m Member) error {
	if err := checkName("member", m.Name); err != nil {
		return err
	}
	if m.Started.IsZero() {
		m.Started = time.Now()
	}
	value, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("cluster: member %s cannot be encoded: %w", m.Name, err)
	}
	rev, err := s.b.create(ctx, m.Name, value)
	if errors.Is(err, errKeyExists) {
		return s.nameTaken(ctx, m.Name)
	}
	if err != nil {
		return fmt.Errorf("cluster: cannot join member %s in %s: %w; check the NATS connection and retry", m.Name, s.b.where(), err)
	}
	hb := &heartbeat{member: m, value: value, stop: make(chan struct{}), done: make(chan struct{}), rev: rev}
	hb.renewed.Store(time.Now().UnixNano())
	s.mu.Lock()
	if old := s.beats[m.Name]; old != nil {
		// The old one's entry expired (it was paused, or its ctx ended)
		// and this Join took the name, as another process could have.
		s.takeOver(old, fmt.Errorf("%w: member %s expired (its heartbeats stopped for more than %v) and a later Join in this process took its name; its heartbeats have stopped",
			ErrNameTaken, m.Name, s.cfg.DeadAfter))
	}
	s.beats[m.Name] = hb
	s.mu.Unlock()
	go s.beat(ctx, hb)
	return nil
}

// takeOver stops old's heartbeats and has its goroutine call OnLost with
// err. s.mu is held.
func (s *memberSet) takeOver(old *heartbeat, err error) {
	select {
	case <-old.stop:
	default:
		old.lost = err
		close(old.stop)
	}
}

// nameTaken says who holds name, so that the operator can tell a second
// process with the same name from a restart that came too soon.
func (s *memberSet) nameTaken(ctx context.Context, name string) error {
	return fmt.Errorf("%w: %s is %s; give this worker another name, or stop the other one (the name of a dead worker frees itself %v after its last heartbeat)",
		ErrNameTaken, name, s.holder(ctx, name), s.cfg.DeadAfter)
}

// holder describes the worker whose entry name is.
func (s *memberSet) holder(ctx context.Context, name string) string {
	if e, err := s.b.get(ctx, name); err == nil {
		var m Member
		if json.Unmarshal(e.value, &m) == nil {
			return describe(m)
		}
	}
	return "a live worker"
}

func describe(m Member) string {
	var b strings.Builder
	b.WriteString("a worker started ")
	b.WriteString(m.Started.Format(time.RFC3339))
	if m.PID != 0 {
		fmt.Fprintf(&b, ", pid %d", m.PID)
	}
	if m.Host != "" {
		b.WriteString(" on " + m.Host)
	}
	return b.String()
}

// beat is hb's goroutine. It closes done before it calls OnLost, so that
// OnLost may call Leave, which waits for done.
func (s *memberSet) beat(ctx context.Context, hb *heartbeat) {
	err := s.heartbeats(ctx, hb)
	close(hb.done)
	if err != nil && s.cfg.OnLost != nil {
		s.cfg.OnLost(hb.member, err)
	}
}

// heartbeats renews hb until ctx ends or stop is closed; it returns why the
// member is lost, or nil.
func (s *memberSet) heartbeats(ctx context.Context, hb *heartbeat) error {
	tick := time.NewTicker(s.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hb.stop:
			return hb.lost
		case <-tick.C:
		}
		if hb.paused.Load() {
			continue
		}
		if err := s.renew(ctx, hb); err != nil {
			return err
		}
	}
}

// renew writes the entry again if it is still the one this process wrote
// last. It returns an error only when the member is lost for good; a
// renewal that fails for another reason (a slow server, a reconnect) is
// tried again at the next beat, and the entry outlives a few of those.
func (s *memberSet) renew(ctx context.Context, hb *heartbeat) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatEvery)
	defer cancel()
	rev, err := s.b.update(ctx, hb.member.Name, hb.value, hb.rev)
	if err == nil {
		hb.rev = rev
		hb.renewed.Store(time.Now().UnixNano())
		return nil
	}
	if errors.Is(err, errRevMismatch) {
		return s.reclaim(ctx, hb)
	}
	return nil
}

// reclaim handles a renewal refused because the entry is not at the
// revision this process wrote last: its own renewal whose reply was lost,
// an expiry while this process was paused or cut off (join again), or
// another worker that joined under the name after the expiry (lost).
func (s *memberSet) reclaim(ctx context.Context, hb *heartbeat) error {
	name := hb.member.Name
	e, err := s.b.get(ctx, name)
	switch {
	case err == nil && bytes.Equal(e.value, hb.value):
		hb.rev = e.rev
		hb.renewed.Store(time.Now().UnixNano())
		return nil
	case err == nil:
		return s.lost(ctx, name)
	case !errors.Is(err, errNoKey):
		return nil
	}
	rev, err := s.b.create(ctx, name, hb.value)
	if errors.Is(err, errKeyExists) {
		return s.lost(ctx, name)
	}
	if err == nil {
		hb.rev = rev
		hb.renewed.Store(time.Now().UnixNano())
	}
	return nil
}

func (s *memberSet) lost(ctx context.Context, name string) error {
	return fmt.Errorf("%w: member %s expired (this worker was paused or cut off from NATS for more than %v) and %s joined under its name; its heartbeats have stopped: stop this worker, or restart it under another name",
		ErrNameTaken, name, s.cfg.DeadAfter, s.holder(ctx, name))
}

// Renewed returns when this process last wrote the entry of name, a member
// it joined; false if it never joined name or has left it.
func (s *memberSet) Renewed(name string) (time.Time, bool) {
	s.mu.Lock()
	hb := s.beats[name]
	s.mu.Unlock()
	if hb == nil {
		return time.Time{}, false
	}
	return time.Unix(0, hb.renewed.Load()), true
}

// live returns the heartbeat of a member this process keeps alive.
func (s *memberSet) live(name string) (*heartbeat, error) {
	s.mu.Lock()
	hb := s.beats[name]
	s.mu.Unlock()
	if hb != nil {
		select {
		case <-hb.done:
		default:
			return hb, nil
		}
	}
	return nil, fmt.Errorf("cluster: member %s is not kept alive by this process (never joined here, left, lost, or its Join's context ended); Join it first", name)
}

// take removes name's heartbeat, if there is one, from this process's.
func (s *memberSet) take(name string) *heartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	hb := s.beats[name]
	delete(s.beats, name)
	return hb
}

// stopBeating stops hb's goroutine; it is safe to call more than once.
func (s *memberSet) stopBeating(hb *heartbeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-hb.stop:
	default:
		close(hb.stop)
	}
}

// Pause stops name's heartbeats without ending its Join, as if they were
// lost on the way: the entry expires after DeadAfter. For tests and fault
// injection.
func (s *memberSet) Pause(name string) error {
	hb, err := s.live(name)
	if err != nil {
		return err
	}
	hb.paused.Store(true)
	return nil
}

// Resume restarts name's heartbeats. If its entry expired meanwhile, the
// next heartbeat joins it again, or calls OnLost if another worker took the
// name.
func (s *memberSet) Resume(name string) error {
	hb, err := s.live(name)
	if err != nil {
		return err
	}
	hb.paused.Store(false)
	return nil
}

// Leave stops the heartbeats first, so that a late one cannot write the
// entry again after the delete. The delete is conditional on what this
// process wrote last, so that it never removes another worker that took
// the name after it expired. A name never joined in this process is
// removed whoever holds it (an operator removing a dead worker by hand; a
// live one comes back at its next heartbeat).
func (s *memberSet) Leave(ctx context.Context, name string) error {
	if err := checkName("member", name); err != nil {
		return err
	}
	var value []byte
	var rev uint64
	if hb := s.take(name); hb != nil {
		s.stopBeating(hb)
		select {
		case <-hb.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		value, rev = hb.value, hb.rev
	}
	err := s.b.delete(ctx, name, rev)
	if errors.Is(err, errRevMismatch) {
		err = s.deleteIfOurs(ctx, name, value)
	}
	if err != nil {
		return fmt.Errorf("cluster: cannot remove member %s from %s: %w; it will expire %v after its last heartbeat anyway", name, s.b.where(), err, s.cfg.DeadAfter)
	}
	return nil
}

// deleteIfOurs deletes name if it still holds value: the revision this
// process knew was stale (a renewal whose reply was lost). A get may be
// answered by a replica that has not yet seen the last renewal (a KV
// bucket allows direct gets from any of its servers), so a delete refused
// again reads again, a few times: the heartbeats have stopped, so the
// entry no longer changes and the replicas catch up.
func (s *memberSet) deleteIfOurs(ctx context.Context, name string, value []byte) error {
	const attempts = 5
	var err error
	for i := range attempts {
		if i > 0 {
			select {
			case <-time.After(time.Duration(i) * 50 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var e entry
		e, err = s.b.get(ctx, name)
		if errors.Is(err, errNoKey) {
			return nil
		}
		if err != nil {
			return err
		}
		if !bytes.Equal(e.value, value) {
			return nil // another worker took the name after it expired
		}
		if err = s.b.delete(ctx, name, e.rev); !errors.Is(err, errRevMismatch) {
			return err
		}
	}
	return err
}

// List decodes every live entry.
func (s *memberSet) List(ctx context.Context) ([]Member, error) {
	entries, err := s.b.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot list members in %s: %w; check the NATS connection and retry", s.b.where(), err)
	}
	members := make([]Member, 0, len(entries))
	for _, e := range entries {
		// An entry that is not a member's heartbeat (written by hand, or by
		// another program) names no worker that could run tasks: it is
		// left out rather than stopping every leader's view of the members.
		if m, ok := decodeMember(e); ok {
			members = append(members, m)
		}
	}
	sortMembers(members)
	return members, nil
}

// decodeMember reads a member's entry; it refuses one that does not
// decode or whose name is not a valid member name equal to its key.
func decodeMember(e entry) (Member, bool) {
	var m Member
	if json.Unmarshal(e.value, &m) != nil || m.Name != e.key || checkName("member", m.Name) != nil {
		return Member{}, false
	}
	return m, true
}

func sortMembers(members []Member) {
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
}

// Watch keeps the entries it has seen and sends the set whenever an entry
// appears, changes or goes: heartbeats write the same value again and send
// nothing.
func (s *memberSet) Watch(ctx context.Context) (<-chan []Member, error) {
	events, err := s.b.watch(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot watch members in %s: %w; check the NATS connection and retry", s.b.where(), err)
	}
	out := make(chan []Member)
	v := &memberView{values: map[string][]byte{}, onInvalid: s.cfg.OnInvalid}
	go relay(ctx, events, out, v.apply)
	return out, nil
}

// memberView is the live set as a watch has seen it.
type memberView struct {
	values    map[string][]byte
	ready     bool // the initial entries are in
	onInvalid func(key string)
}

func (v *memberView) apply(ev event) [][]Member {
	changed := ev.initDone
	switch {
	case ev.initDone:
		v.ready = true
	case ev.deleted:
		_, changed = v.values[ev.key]
		delete(v.values, ev.key)
	case !bytes.Equal(v.values[ev.key], ev.value):
		v.values[ev.key] = ev.value
		changed = true
		if _, ok := decodeMember(ev.entry); !ok && v.onInvalid != nil {
			v.onInvalid(ev.key)
		}
	}
	if !v.ready || !changed {
		return nil
	}
	return [][]Member{v.members()}
}

// members decodes the set; an entry that is not a member is left out, as
// List leaves it out.
func (v *memberView) members() []Member {
	members := make([]Member, 0, len(v.values))
	for key, value := range v.values {
		if m, ok := decodeMember(entry{key: key, value: value}); ok {
			members = append(members, m)
		}
	}
	sortMembers(members)
	return members
}
