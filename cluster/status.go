package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StatusBucket holds what every worker reports of its tasks.
const StatusBucket = "ackflow_status"

// Report is one worker's report on its part of one topology. Data is the
// runtime's own encoding (workers.Report); the bucket only keeps the
// latest per worker and topology, and forgets it DeadAfter after the
// worker stops reporting.
type Report struct {
	Topology string
	Member   string
	Data     []byte
}

// Statuses holds the latest report of every worker on every topology.
type Statuses interface {
	// Put replaces the report of r.Member on r.Topology.
	Put(ctx context.Context, r Report) error
	// List returns the live reports on topology, by member.
	List(ctx context.Context, topology string) ([]Report, error)
}

// KVStatuses is Statuses in the JetStream KV bucket ackflow_status, one
// key per topology and member ("<topology>.<member>"), with a TTL of
// DeadAfter.
type KVStatuses struct{ *statuses }

// NewKVStatuses opens the status bucket, creating it or updating it to
// cfg's TTL. The caller keeps ownership of js and its connection.
func NewKVStatuses(ctx context.Context, js jetstream.JetStream, cfg MembersConfig, opts ...Option) (*KVStatuses, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	b, err := openKVBucket(ctx, js, ttlBucketConfig(StatusBucket, "ackflow worker reports", cfg.DeadAfter), opts)
	if err != nil {
		return nil, err
	}
	return &KVStatuses{&statuses{b: b}}, nil
}

// MemoryStatuses is Statuses in memory, for tests.
type MemoryStatuses struct{ *statuses }

// NewMemoryStatuses returns an empty MemoryStatuses whose reports expire
// after cfg.DeadAfter.
func NewMemoryStatuses(cfg MembersConfig) (*MemoryStatuses, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &MemoryStatuses{&statuses{b: newMemBucket(cfg.DeadAfter)}}, nil
}

type statuses struct{ b bucket }

func statusKey(topology, member string) string { return topology + "." + member }

func (s *statuses) Put(ctx context.Context, r Report) error {
	if err := checkName("topology", r.Topology); err != nil {
		return err
	}
	if err := checkName("member", r.Member); err != nil {
		return err
	}
	key := statusKey(r.Topology, r.Member)
	// Only this member writes its key; a race with its own expiry is
	// settled by trying again.
	for range 3 {
		e, err := s.b.get(ctx, key)
		switch {
		case errors.Is(err, errNoKey):
			_, err = s.b.create(ctx, key, r.Data)
		case err == nil:
			_, err = s.b.update(ctx, key, r.Data, e.rev)
		}
		if err == nil || !errors.Is(err, errKeyExists) && !errors.Is(err, errRevMismatch) {
			if err != nil {
				return fmt.Errorf("cluster: cannot write the report of %s on %s in %s: %w", r.Member, r.Topology, s.b.where(), err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: the report of %s on %s kept changing under it", ErrConflict, r.Member, r.Topology)
}

func (s *statuses) List(ctx context.Context, topology string) ([]Report, error) {
	if err := checkName("topology", topology); err != nil {
		return nil, err
	}
	entries, err := s.b.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot list reports in %s: %w; check the NATS connection and retry", s.b.where(), err)
	}
	var out []Report
	for _, e := range entries {
		if member, ok := strings.CutPrefix(e.key, topology+"."); ok {
			out = append(out, Report{Topology: topology, Member: member, Data: e.value})
		}
	}
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.Member, b.Member) })
	return out, nil
}

// Timing returns the liveness timing the cluster's workers run with, as
// the TTL of the members bucket says (HeartbeatEvery is taken as a third
// of it), or the defaults if no worker has made the bucket yet. Tools
// that open the buckets pass it, so that opening one does not change its
// TTL under the workers.
func Timing(ctx context.Context, js jetstream.JetStream) (MembersConfig, error) {
	kv, err := js.KeyValue(ctx, MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return DefaultMembersConfig(), nil
	}
	if err != nil {
		return MembersConfig{}, fmt.Errorf("cluster: cannot read bucket %s: %w", MembersBucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return MembersConfig{}, fmt.Errorf("cluster: cannot read bucket %s: %w", MembersBucket, err)
	}
	ttl := st.TTL()
	if ttl <= 0 {
		return DefaultMembersConfig(), nil
	}
	return MembersConfig{HeartbeatEvery: ttl / 3, DeadAfter: ttl}, nil
}
