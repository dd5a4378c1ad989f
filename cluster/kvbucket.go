package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kvBucket is a bucket in JetStream KV.
type kvBucket struct {
	kv jetstream.KeyValue
	js jetstream.JetStream

	mu     sync.Mutex
	stream jetstream.Stream // the bucket's stream, looked up on the first list
}

// Bucket names. They are fixed so that every worker of a cluster finds the
// same buckets without being told.
const (
	MembersBucket     = "ackflow_members"
	TopologiesBucket  = "ackflow_topologies"
	GenerationsBucket = "ackflow_generations"
	LeadersBucket     = "ackflow_leaders"
)

// Option changes how the KV constructors create their buckets.
type Option func(*options)

type options struct{ replicas int }

// Replicas makes the buckets keep n copies on the servers of a NATS
// cluster (JetStream replicas; at most the number of servers), so that
// losing a server loses no membership, submission or generation. Without
// it a new bucket has one, and an existing bucket keeps what it has.
func Replicas(n int) Option { return func(o *options) { o.replicas = n } }

// openKVBucket binds to the bucket cfg describes, creating it, or updating
// it if its configuration differs (a new TTL, when the cluster's timing
// changed). An update keeps the bucket's replicas, which an operator may
// have raised.
//
// It binds first and writes only when it must: binding reads the stream's
// info, which the stream's own leader (or any replica while it has none)
// answers, while a create or update goes to the JetStream meta leader. A
// meta leader is re-elected when a server of a NATS cluster restarts, and
// a request sent meanwhile gets no answer at all, so every worker start,
// `ackflow status` or `list` in those seconds waited out its whole
// timeout when opening a bucket that was there all along.
func openKVBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, opts []Option) (*kvBucket, error) {
	if js == nil {
		return nil, fmt.Errorf("cluster: no JetStream context for bucket %s; pass one made with jetstream.New on a NATS connection", cfg.Bucket)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg.Storage = jetstream.FileStorage // survives a restart of the server
	cfg.Replicas = o.replicas
	// The bind gets a short time of its own: a bucket another worker is
	// creating this very moment may not answer it until its stream has a
	// leader, and the create below is then the request that settles it.
	bctx, cancel := context.WithTimeout(ctx, bindTimeout)
	kv, err := js.KeyValue(bctx, cfg.Bucket)
	var st jetstream.KeyValueStatus
	if err == nil {
		st, err = kv.Status(bctx)
	}
	cancel()
	switch {
	case err == nil && sameBucket(st, cfg):
	case err == nil:
		kv, err = updateKVBucket(ctx, js, cfg)
	default: // missing, or the bind was not answered
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = updateKVBucket(ctx, js, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot create or update KV bucket %s: %w; check that the NATS server runs JetStream (v2.11 or newer, for TTL markers) and that the account may create streams", cfg.Bucket, err)
	}
	return &kvBucket{kv: kv, js: js}, nil
}

// bindTimeout bounds binding to an existing bucket before openKVBucket
// falls back to creating it.
const bindTimeout = 2 * time.Second

// sameBucket reports whether an existing bucket already has what cfg asks
// for, the settings openKVBucket's callers choose: its TTL, limit markers,
// description and storage, and its replicas when cfg names them.
func sameBucket(st jetstream.KeyValueStatus, cfg jetstream.KeyValueConfig) bool {
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	sc := bs.StreamInfo().Config
	return sc.MaxAge == cfg.TTL && sc.SubjectDeleteMarkerTTL == cfg.LimitMarkerTTL && sc.Description == cfg.Description &&
		sc.Storage == cfg.Storage && (cfg.Replicas == 0 || sc.Replicas == cfg.Replicas)
}

func updateKVBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && cfg.Replicas == 0 {
		cfg.Replicas = bs.StreamInfo().Config.Replicas
	}
	return js.UpdateKeyValue(ctx, cfg)
}

// ttlBucketConfig is a bucket whose keys live for ttl after their last
// write. The limit markers make an expiry visible to watchers (DESIGN.md
// section 7); the server keeps a marker for at least a second.
func ttlBucketConfig(name, description string, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         name,
		Description:    description,
		TTL:            ttl,
		LimitMarkerTTL: max(ttl, time.Second),
	}
}

func (b *kvBucket) where() string { return "bucket " + b.kv.Bucket() }

func (b *kvBucket) get(ctx context.Context, key string) (entry, error) {
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return entry{}, errNoKey
	}
	if err != nil {
		return entry{}, err
	}
	return entry{key: key, value: e.Value(), rev: e.Revision()}, nil
}

// create relies on KeyValue.Create, which also succeeds over a delete or
// expiry marker. Over a marker, nats.go reads the key's last revision and
// writes on it; on a replicated bucket the read can come from a replica
// that lags (or the marker's TTL ends in between), and the write then
// fails with "wrong last sequence" (code 10164) although the key is free:
// a worker that left and came back at once could not join (the VM test
// saw it). Such a failure is tried again a few times; a key that a live
// entry holds comes back as errKeyExists from the next try.
//
// Create also says the key exists when the marker's own TTL ends between
// its first write, which the marker refused, and its read of the key,
// which then finds nothing. A worker cut off from NATS past its lease hit
// this when it came back and took its own expired name again: it was told
// that another worker had the name, and stopped. So errKeyExists is
// returned only when a read finds the key live; a free key is tried again.
func (b *kvBucket) create(ctx context.Context, key string, value []byte) (uint64, error) {
	for try := 1; ; try++ {
		rev, err := b.kv.Create(ctx, key, value)
		if errors.Is(err, jetstream.ErrKeyExists) {
			_, gerr := b.get(ctx, key)
			switch {
			case gerr == nil || try == createTries:
				return 0, errKeyExists
			case !errors.Is(gerr, errNoKey):
				return 0, fmt.Errorf("the key exists, but reading it failed: %w", gerr)
			}
		} else if err == nil || try == createTries || !wrongLastSequence(err) {
			return rev, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// createTries bounds the tries of create: about a second of waits.
const createTries = 8

// wrongLastSequence says whether err is JetStream's refusal of a write
// that expected another last revision of its key.
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (b *kvBucket) update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	rev, err := b.kv.Update(ctx, key, value, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, errRevMismatch
	}
	return rev, err
}

func (b *kvBucket) delete(ctx context.Context, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := b.kv.Delete(ctx, key, opts...)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return errRevMismatch
	}
	return err
}

// list reads every live key with its latest value, in the order of their
// revisions. It asks the bucket's stream for its subjects and gets each
// key's latest entry, instead of reading a watch's initial entries: a
// watch is a consumer, which the JetStream meta leader creates, and while
// a NATS cluster re-elects its meta leader (a server restarted) the
// request gets no answer, so `ackflow status` and `list` waited out their
// timeout. A stream's info and a key's get are answered by the stream's
// own servers.
func (b *kvBucket) list(ctx context.Context) ([]entry, error) {
	stream, err := b.bucketStream(ctx)
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + b.kv.Bucket() + "."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	var entries []entry
	for subject := range info.State.Subjects {
		e, err := b.get(ctx, strings.TrimPrefix(subject, prefix))
		switch {
		case errors.Is(err, errNoKey):
			// Deleted or expired: the subject keeps its marker.
		case err != nil:
			return nil, err
		default:
			entries = append(entries, e)
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.rev, b.rev) })
	return entries, nil
}

// bucketStream returns the bucket's stream, looked up once: each list
// then asks for its subjects only.
func (b *kvBucket) bucketStream(ctx context.Context) (jetstream.Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stream == nil {
		st, err := b.js.Stream(ctx, "KV_"+b.kv.Bucket())
		if err != nil {
			return nil, err
		}
		b.stream = st
	}
	return b.stream, nil
}

func (b *kvBucket) watch(ctx context.Context, key string) (<-chan event, error) {
	// The watcher unsubscribes when its context ends; it must be one that
	// ends, or nats.go leaves a goroutine waiting for it for good.
	wctx, cancel := context.WithCancel(ctx)
	var w jetstream.KeyWatcher
	var err error
	if key == "" {
		w, err = b.kv.WatchAll(wctx)
	} else {
		w, err = b.kv.Watch(wctx, key)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	out := make(chan event)
	go func() {
		defer close(out)
		defer stopWatcher(w, cancel)
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
				return
			case e, ok = <-w.Updates():
				if !ok {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case out <- toEvent(e):
			}
		}
	}()
	return out, nil
}

// stopWatcher ends w and reads what is left in its channel: nats.go's
// callback blocks on a full channel, and the channel is closed only when
// that callback has returned and the subscription has ended.
func stopWatcher(w jetstream.KeyWatcher, cancel context.CancelFunc) {
	cancel()
	_ = w.Stop() // an error means it has stopped already
	for range w.Updates() {
	}
}

// toEvent converts a watcher's entry; nats.go sends nil after the initial
// entries.
func toEvent(e jetstream.KeyValueEntry) event {
	if e == nil {
		return event{initDone: true}
	}
	return event{
		entry:   entry{key: e.Key(), value: e.Value(), rev: e.Revision()},
		deleted: e.Operation() != jetstream.KeyValuePut,
	}
}
