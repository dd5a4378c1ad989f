package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// ObjectStore is a Store in a JetStream object store bucket, for cluster
// mode: every worker reaches it, and it outlives the workers. JetStream
// makes an object visible only when its metadata is written, after all of
// its chunks, so a reader sees a whole object or none; a Put cut short
// leaves chunks that no object refers to, which a later Put of the same
// name purges.
type ObjectStore struct {
	js     jetstream.JetStream
	obs    jetstream.ObjectStore
	bucket string

	mu     sync.Mutex
	stream jetstream.Stream // the bucket's stream, once looked up
}

// BucketName is the bucket of topology's checkpoints in cluster mode,
// ackflow_ckpt_<topology>. It refuses a topology name that a bucket name
// cannot hold (anything but letters, digits, '-' and '_').
func BucketName(topology string) (string, error) {
	if err := checkTopology(topology); err != nil {
		return "", err
	}
	return "ackflow_ckpt_" + topology, nil
}

// NewObjectStore binds to bucket, creating it with file storage if it does
// not exist. The caller keeps ownership of js and its connection.
func NewObjectStore(ctx context.Context, js jetstream.JetStream, bucket string, opts ...ObjectStoreOption) (*ObjectStore, error) {
	var o objectStoreOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !validBucket(bucket) {
		return nil, fmt.Errorf("checkpoint: %q cannot name a JetStream object store bucket; use letters, digits, '-' and '_' (BucketName makes one from a topology name)", bucket)
	}
	obs, err := js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = create(ctx, js, bucket, o.replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: cannot open or create object store bucket %s: %w; check that the NATS server has JetStream enabled and that the account may create streams", bucket, err)
	}
	return &ObjectStore{js: js, obs: obs, bucket: bucket}, nil
}

// ObjectStoreOption changes how NewObjectStore creates a bucket.
type ObjectStoreOption func(*objectStoreOptions)

type objectStoreOptions struct{ replicas int }

// Replicas makes a new bucket keep n copies on the servers of a NATS
// cluster, so that losing a server loses no checkpoint. An existing bucket
// keeps what it has.
func Replicas(n int) ObjectStoreOption { return func(o *objectStoreOptions) { o.replicas = n } }

func create(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (jetstream.ObjectStore, error) {
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "ackflow checkpoints",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another worker created it between the lookup and the creation.
		return js.ObjectStore(ctx, bucket)
	}
	return obs, err
}

func validBucket(bucket string) bool {
	if bucket == "" {
		return false
	}
	for _, c := range []byte(bucket) {
		if !nameByte(c) || c == '.' {
			return false
		}
	}
	return true
}

// Bucket is the name of the bucket.
func (s *ObjectStore) Bucket() string { return s.bucket }

func (s *ObjectStore) where() string { return "bucket " + s.bucket }

// The object store's layout in its stream, as nats.go writes it
// (jetstream/object.go): chunks on a subject per object version (its
// NUID), the metadata on a subject per name, the latest kept.
func (s *ObjectStore) chunkSubject(nuid string) string { return "$O." + s.bucket + ".C." + nuid }
func (s *ObjectStore) metaSubject(name string) string {
	return "$O." + s.bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}
func (s *ObjectStore) metaSubjects() string { return "$O." + s.bucket + ".M.>" }

// bucketStream returns the bucket's stream, looked up on first use.
func (s *ObjectStore) bucketStream(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream == nil {
		st, err := s.js.Stream(ctx, "OBJ_"+s.bucket)
		if err != nil {
			return nil, err
		}
		s.stream = st
	}
	return s.stream, nil
}

// Put stores data under name. It writes the object in the object store's
// own layout (chunks, then the metadata that makes them visible) with
// synchronous publishes rather than nats.go's Put: that one starts a
// goroutine per call that, when the call ends before it has run, waits on
// a nil channel forever, so a worker that checkpoints every second would
// leak goroutines without end (nats.go v1.55.0, jetstream/object.go).
func (s *ObjectStore) Put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	if err := s.put(ctx, name, data); err != nil {
		return fmt.Errorf("checkpoint: cannot store %s in %s: %w; the object is unchanged: check the NATS connection and the server's JetStream storage, then retry", name, s.where(), err)
	}
	return nil
}

// chunkSize is the size of an object's chunks, nats.go's default.
const chunkSize = 128 * 1024

func (s *ObjectStore) put(ctx context.Context, name string, data []byte) error {
	old, err := s.obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	id := nuid.Next()
	chunks := s.chunkSubject(id)
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: chunkSize}},
		Bucket:     s.bucket,
		NUID:       id,
		Size:       uint64(len(data)),
	}
	h := sha256.New()
	for off := 0; off < len(data); off += chunkSize {
		chunk := data[off:min(off+chunkSize, len(data))]
		h.Write(chunk)
		if _, err := s.js.Publish(ctx, chunks, chunk); err != nil {
			s.purge(chunks)
			return err
		}
		info.Chunks++
	}
	info.Digest = jetstream.GetObjectDigestValue(h)
	meta := nats.NewMsg(s.metaSubject(name))
	meta.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if meta.Data, err = json.Marshal(info); err != nil {
		s.purge(chunks)
		return err
	}
	if _, err := s.js.PublishMsg(ctx, meta); err != nil {
		s.purge(chunks)
		return err
	}
	if old != nil && !old.Deleted {
		s.purge(s.chunkSubject(old.NUID))
	}
	return nil
}

// purge removes chunks that no object refers to any more. It is best
// effort: chunks it leaves are purged by the next Put of the same name.
func (s *ObjectStore) purge(subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), purgeTimeout)
	defer cancel()
	if st, err := s.bucketStream(ctx); err == nil {
		_ = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
}

// purgeTimeout bounds the removal of unreferenced chunks.
const purgeTimeout = 5 * time.Second

// Get reads the object's chunks from the bucket's stream one direct read
// at a time and checks them against the SHA-256 digest JetStream stored
// with the object. It does not use the client's Get, which streams the
// chunks through an ordered consumer into a pipe: when setting up that
// consumer fails, as over a connection that has just dropped, a chunk
// already delivered stays blocked on the pipe with no reader, and the
// subscription's goroutine never ends.
func (s *ObjectStore) Get(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	info, err := s.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, notFound(name, s.where(), err)
	}
	cannot := func(err error) error {
		return fmt.Errorf("checkpoint: cannot read %s in %s: %w; check the NATS connection and retry", name, s.where(), err)
	}
	if err != nil {
		return nil, cannot(err)
	}
	data := make([]byte, 0, info.Size)
	if info.Size > 0 {
		st, err := s.bucketStream(ctx)
		if err != nil {
			return nil, cannot(err)
		}
		subject := s.chunkSubject(info.NUID)
		seq := uint64(1)
		for n := range info.Chunks {
			m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if err != nil {
				return nil, cannot(fmt.Errorf("chunk %d of %d: %w", n+1, info.Chunks, err))
			}
			data = append(data, m.Data...)
			seq = m.Sequence + 1
		}
	}
	want, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s in %s has no digest to check it against (%q): %w", name, s.where(), info.Digest, err)
	}
	if got := sha256.Sum256(data); uint64(len(data)) != info.Size || !bytes.Equal(got[:], want) {
		return nil, fmt.Errorf("checkpoint: %s in %s does not match the digest stored with it (%d bytes read of %d): the object is damaged", name, s.where(), len(data), info.Size)
	}
	return data, nil
}

// listTimeout bounds one listing of a bucket.
const listTimeout = 30 * time.Second

// List lists the bucket and keeps the names that start with prefix: the
// object store has no listing by prefix, and a topology's bucket holds a
// few epochs of its tasks, not more.
func (s *ObjectStore) List(ctx context.Context, prefix string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckPrefix(prefix); err != nil {
		return nil, err
	}
	// The objects' metadata are read from the bucket's stream one direct
	// read at a time (the stream keeps the latest per object). nats.go's
	// List goes through a watcher instead, whose message handler blocks
	// for good on a full channel when the listing is given up (ctx ended,
	// or the connection dropped midway), and which waits for a marker that
	// an empty bucket of a NATS cluster may never send.
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	cannot := func(err error) error {
		return fmt.Errorf("checkpoint: cannot list %s: %w; check the NATS connection and retry", s.where(), err)
	}
	st, err := s.bucketStream(ctx)
	if err != nil {
		return nil, cannot(err)
	}
	var names []string
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.metaSubjects()))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, cannot(err)
		}
		seq = m.Sequence + 1
		var info jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return nil, cannot(fmt.Errorf("the metadata at sequence %d do not decode: %w", m.Sequence, err))
		}
		if !info.Deleted && strings.HasPrefix(info.Name, prefix) && CheckName(info.Name) == nil {
			names = append(names, info.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Delete removes the object; a missing one is not an error.
func (s *ObjectStore) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckName(name); err != nil {
		return err
	}
	err := s.obs.Delete(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("checkpoint: cannot delete %s in %s: %w; check the NATS connection and retry", name, s.where(), err)
	}
	return nil
}
