package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// memBucket imitates a JetStream KV bucket in memory: one revision counter
// for the bucket, compare-and-set on a key's latest revision, and with a TTL,
// keys that expire when they are not written for that long, leaving a
// marker that watchers see.
type memBucket struct {
	ttl time.Duration
	// hold, when set, keeps a key whose TTL ran out while it reports true
	// (see MemoryCluster.HoldMembers); called with mu held.
	hold func(key string) bool

	// mu is taken before a memWatcher's mu, never after.
	mu       sync.Mutex
	rev      uint64
	keys     map[string]*memKey
	watchers map[*memWatcher]struct{}
}

// memKey is a key's latest revision; a removed key keeps its revision, as
// the marker does in JetStream, so that a stale compare-and-set still fails.
type memKey struct {
	value   []byte
	rev     uint64
	removed bool
	expiry  *time.Timer
}

func newMemBucket(ttl time.Duration) *memBucket {
	return &memBucket{ttl: ttl, keys: map[string]*memKey{}, watchers: map[*memWatcher]struct{}{}}
}

func (b *memBucket) where() string { return "memory" }

func (b *memBucket) get(ctx context.Context, key string) (entry, error) {
	if err := ctx.Err(); err != nil {
		return entry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[key]
	if k == nil || k.removed {
		return entry{}, errNoKey
	}
	return entry{key: key, value: slices.Clone(k.value), rev: k.rev}, nil
}

func (b *memBucket) create(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.keys[key]; k != nil && !k.removed {
		return 0, errKeyExists
	}
	return b.write(key, value, false), nil
}

func (b *memBucket) update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest(key) != rev {
		return 0, errRevMismatch
	}
	return b.write(key, value, false), nil
}

func (b *memBucket) delete(ctx context.Context, key string, rev uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if rev != 0 && b.latest(key) != rev {
		return errRevMismatch
	}
	b.write(key, nil, true)
	return nil
}

// expire removes key now, as if its TTL had run out: for MemoryMembers.Kill.
func (b *memBucket) expire(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.keys[key]; k != nil && !k.removed {
		b.write(key, nil, true)
	}
}

func (b *memBucket) list(ctx context.Context) ([]entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live(""), nil
}

// latest is the key's latest revision, 0 if it was never written.
func (b *memBucket) latest(key string) uint64 {
	if k := b.keys[key]; k != nil {
		return k.rev
	}
	return 0
}

// live returns the live entries of key (of every key if key is ""), in
// revision order as a JetStream watch sends them. b.mu is held.
func (b *memBucket) live(key string) []entry {
	var entries []entry
	for name, k := range b.keys {
		if !k.removed && (key == "" || key == name) {
			entries = append(entries, entry{key: name, value: slices.Clone(k.value), rev: k.rev})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.rev, b.rev) })
	return entries
}

// write stores a revision of key and tells the watchers. b.mu is held.
func (b *memBucket) write(key string, value []byte, removed bool) uint64 {
	b.rev++
	k := b.keys[key]
	if k == nil {
		k = &memKey{}
		b.keys[key] = k
	}
	if k.expiry != nil {
		k.expiry.Stop()
		k.expiry = nil
	}
	k.value, k.rev, k.removed = slices.Clone(value), b.rev, removed
	if b.ttl > 0 && !removed {
		rev := b.rev
		k.expiry = time.AfterFunc(b.ttl, func() { b.expireRev(key, rev) })
	}
	ev := event{entry: entry{key: key, value: k.value, rev: k.rev}, deleted: removed}
	for w := range b.watchers {
		w.push(ev)
	}
	return b.rev
}

// expireRev removes key if rev is still its latest revision: a timer that
// fired while a write was stopping it must not remove the newer revision.
func (b *memBucket) expireRev(key string, rev uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.keys[key]
	if k == nil || k.rev != rev || k.removed {
		return
	}
	if b.hold != nil && b.hold(key) {
		// Looked at again a quarter of the TTL on: a key released
		// expires at most that long after its TTL ran out.
		k.expiry = time.AfterFunc(b.ttl/4, func() { b.expireRev(key, rev) })
		return
	}
	b.write(key, nil, true)
}

// setHold sets hold; see MemoryCluster.HoldMembers.
func (b *memBucket) setHold(hold func(key string) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hold = hold
}

func (b *memBucket) watch(ctx context.Context, key string) (<-chan event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &memWatcher{key: key, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	for _, e := range b.live(key) {
		w.queue = append(w.queue, event{entry: e})
	}
	w.queue = append(w.queue, event{initDone: true})
	b.watchers[w] = struct{}{}
	b.mu.Unlock()
	out := make(chan event)
	go func() {
		defer close(out)
		defer b.unwatch(w)
		w.run(ctx, out)
	}()
	return out, nil
}

func (b *memBucket) unwatch(w *memWatcher) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.watchers, w)
}

// memWatcher queues events for one watch, so that a write never waits for
// a watcher's reader.
type memWatcher struct {
	key  string
	wake chan struct{}

	mu    sync.Mutex
	queue []event
}

// push queues ev if it is of the watched key. The bucket's lock is held,
// which keeps events in revision order.
func (w *memWatcher) push(ev event) {
	if w.key != "" && w.key != ev.key {
		return
	}
	ev.value = slices.Clone(ev.value)
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *memWatcher) run(ctx context.Context, out chan<- event) {
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range batch {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		}
	}
}
