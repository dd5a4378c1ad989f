package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Coordination is what one worker process coordinates through: the
// cluster's live members, the submitted topologies, their generations,
// their leaders, the workers' status reports and the positions of
// spouts without checkpoints. Every worker of a cluster holds handles of its own
// on the same buckets.
type Coordination struct {
	Members     Members
	Registry    Registry
	Generations Generations
	Elector     Elector
	Statuses    Statuses
	Positions   Positions
}

// OpenKV opens a worker's handles on the cluster's KV buckets, creating
// the buckets that do not exist yet. The caller keeps ownership of js and
// its connection.
func OpenKV(ctx context.Context, js jetstream.JetStream, cfg MembersConfig, opts ...Option) (Coordination, error) {
	var c Coordination
	var err error
	if c.Members, err = NewKVMembers(ctx, js, cfg, opts...); err != nil {
		return c, err
	}
	if c.Registry, err = NewKVRegistry(ctx, js, opts...); err != nil {
		return c, err
	}
	if c.Generations, err = NewKVGenerations(ctx, js, opts...); err != nil {
		return c, err
	}
	if c.Elector, err = NewKVElector(ctx, js, cfg, opts...); err != nil {
		return c, err
	}
	if c.Statuses, err = NewKVStatuses(ctx, js, cfg, opts...); err != nil {
		return c, err
	}
	c.Positions, err = NewKVPositions(ctx, js, opts...)
	return c, err
}

// MemoryCluster is a cluster's buckets in memory, the twin of the KV
// buckets on its NATS servers, for workers that run in one process (local
// mode and tests). Each worker opens handles of its own with Open, as each
// worker process opens the buckets on the server: what a handle keeps for
// its process (the members it keeps alive, the leases it holds, the
// callbacks of its MembersConfig) stays with it; the entries are shared.
type MemoryCluster struct {
	cfg                                               MembersConfig
	members, registry, generations, leaders, statuses *memBucket
	positions                                         *memBucket
	id                                                string
}

// ID tells this cluster from other in-memory clusters whose workers have
// the same names (local runs of other topologies) on the same NATS
// server: a random 16 hex digits.
func (c *MemoryCluster) ID() string { return c.id }

// HoldMembers makes a member's entry outlive its TTL while alive(name)
// reports the member running; once it reports false, the entry expires at
// most a quarter of DeadAfter after the later of its TTL and that moment.
// For a cluster whose workers all run in this process, which knows when
// one ends: there a renewal comes late only because the process is busy
// (its goroutines wait for the CPU, under load or the race detector), and
// taking the worker for dead would move its tasks for nothing; without
// checkpoints a moved spout starts its source again. Leader leases and
// reports still expire by their TTL: a leader whose renewal is late steps
// down by itself, and another takes over without moving a task. alive is
// called with the bucket locked: it must not call into this cluster.
func (c *MemoryCluster) HoldMembers(alive func(name string) bool) {
	c.members.setHold(alive)
}

// NewMemoryCluster returns an empty cluster whose members, leader leases
// and reports expire after cfg.DeadAfter.
func NewMemoryCluster(cfg MembersConfig) (*MemoryCluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	var id [8]byte
	rand.Read(id[:]) // never fails (crypto/rand)
	return &MemoryCluster{cfg: cfg, members: newMemBucket(cfg.DeadAfter), registry: newMemBucket(0), generations: newMemBucket(0),
		leaders: newMemBucket(cfg.DeadAfter), statuses: newMemBucket(cfg.DeadAfter), positions: newMemBucket(0), id: hex.EncodeToString(id[:])}, nil
}

// Open returns one worker's handles. cfg's callbacks are that worker's;
// its timing, where set, must be the cluster's (the buckets' TTLs are
// DeadAfter, as on a server), and HeartbeatEvery may differ per worker.
func (c *MemoryCluster) Open(cfg MembersConfig) (Coordination, error) {
	if cfg.DeadAfter != 0 && cfg.DeadAfter != c.cfg.DeadAfter {
		return Coordination{}, fmt.Errorf("cluster: a worker with DeadAfter %v cannot join an in-memory cluster whose entries expire after %v; leave it zero or use the cluster's", cfg.DeadAfter, c.cfg.DeadAfter)
	}
	cfg.DeadAfter = c.cfg.DeadAfter
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = c.cfg.HeartbeatEvery
	}
	if err := cfg.Validate(); err != nil {
		return Coordination{}, err
	}
	return Coordination{
		Members:     &MemoryMembers{memberSet: newMemberSet(c.members, cfg), b: c.members},
		Registry:    &MemoryRegistry{&registry{b: c.registry}},
		Generations: &MemoryGenerations{&generations{b: c.generations}},
		Elector:     &MemoryElector{newElector(c.leaders, cfg)},
		Statuses:    &MemoryStatuses{&statuses{b: c.statuses}},
		Positions:   &MemoryPositions{&positions{b: c.positions}},
	}, nil
}
