package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ackflow/ackflow/topology"
)

// The cluster's buckets are written by workers and operator commands, but
// anyone with the account's permissions can put anything there. These fuzz
// targets feed arbitrary values to the decoders of specs, generations and
// members: they must not panic, what they accept must pass the checks that
// writers apply, and it must survive encoding and decoding unchanged.

func FuzzDecodeSpec(f *testing.F) {
	good, _ := json.Marshal(Spec{Name: "wc", Guarantee: "exactly-once", Parallelism: map[string]int{"count": 3},
		Settings: map[string]string{"rate": "100"}, CheckpointEvery: time.Second, State: StateRunning, Submitted: time.Unix(1e9, 0).UTC()})
	for _, seed := range []string{
		string(good),
		`{"name":"wc","guarantee":"at-least-once","state":"finished"}`,
		`{"name":"wc","guarantee":"at-least-once","state":"running","parallelism":{"count":0}}`,
		`{"name":"wc","guarantee":"at-least-once","state":"running","parallelism":{"count":100000000}}`,
		`{"name":"other","guarantee":"at-least-once","state":"running"}`,
		`{"name":"wc","guarantee":"","state":"running"}`,
		`{"name":"wc","guarantee":"at-least-once","state":"exploded"}`,
		`{"name":"wc","guarantee":"at-least-once","state":"running","checkpoint_every_ns":-5}`,
		`{"name":"a.b","guarantee":"at-least-once","state":"running"}`,
		`[]`, `null`, ``, `{`, `{"name":1}`,
	} {
		f.Add("wc", []byte(seed))
	}
	r := &registry{b: newMemBucket(0)}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		spec, err := r.decode(entry{key: key, value: value})
		if err != nil {
			if !strings.Contains(err.Error(), "delete it") {
				t.Fatalf("a refused spec's error does not say what to do: %v", err)
			}
			return
		}
		if err := checkSpec(spec); err != nil || spec.Name != key {
			t.Fatalf("decode accepted a spec that Submit would refuse (%v) or that names %q under key %q", err, spec.Name, key)
		}
		for _, n := range spec.Parallelism {
			if n < 1 || n > topology.MaxParallelism {
				t.Fatalf("decode accepted parallelism %d", n)
			}
		}
		roundTrip(t, spec, func(b []byte) (any, error) { return r.decode(entry{key: key, value: b}) })
	})
}

func FuzzDecodeGeneration(f *testing.F) {
	good, _ := json.Marshal(Generation{Topology: "wc", Number: 3, Parallelism: map[string]int{"count": 2},
		Assignment: map[int]string{0: "w1", 1: "w2"}, RestoreFrom: 7, Leader: "w1", Created: time.Unix(1e9, 0).UTC(), Reason: "member w3 left", Fingerprint: "abc"})
	for _, seed := range []string{
		string(good),
		`{"topology":"wc","number":1}`,
		`{"topology":"wc","number":0}`,
		`{"topology":"wc","number":1,"assignment":{"-1":"w1"}}`,
		`{"topology":"wc","number":1,"assignment":{"0":""}}`,
		`{"topology":"wc","number":1,"assignment":{"x":"w1"}}`,
		`{"topology":"wc","number":1,"parallelism":{"count":-3}}`,
		`{"topology":"wc","number":1,"parallelism":{"count":1e12}}`,
		`{"topology":"other","number":1}`,
		`{"topology":"wc","number":-1}`,
		`null`, `"wc"`, ``,
	} {
		f.Add("wc", []byte(seed))
	}
	s := &generations{b: newMemBucket(0)}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		g, err := s.decode(entry{key: key, value: value})
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), "leader writes a new generation over it") {
				t.Fatalf("a refused generation's error does not say what happens next: %v", err)
			}
			return
		}
		if err := checkGeneration(g); err != nil || g.Topology != key {
			t.Fatalf("decode accepted a generation that Next would refuse (%v) or of topology %q under key %q", err, g.Topology, key)
		}
		for task := range g.Assignment {
			if task < 0 {
				t.Fatalf("decode accepted task %d", task)
			}
		}
		roundTrip(t, g, func(b []byte) (any, error) { return s.decode(entry{key: key, value: b}) })
	})
}

func FuzzDecodeMember(f *testing.F) {
	good, _ := json.Marshal(Member{Name: "w1", Started: time.Unix(1e9, 0).UTC(), Host: "vm1", PID: 42,
		Topologies: map[string]string{"wc": "abc"}, Version: "v1"})
	for _, seed := range []string{string(good), `{"name":"w2"}`, `{"name":""}`, `{"name":"w 1"}`, `{}`, `[1]`, ``} {
		f.Add("w1", []byte(seed))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		m, ok := decodeMember(entry{key: key, value: value})
		if !ok {
			return
		}
		if m.Name != key || checkName("member", m.Name) != nil {
			t.Fatalf("decodeMember accepted %q under key %q", m.Name, key)
		}
		roundTrip(t, m, func(b []byte) (any, error) {
			m, ok := decodeMember(entry{key: key, value: b})
			if !ok {
				return nil, errRefused
			}
			return m, nil
		})
	})
}

var errRefused = errors.New("refused")

// roundTrip checks that v, encoded and decoded again, encodes the same.
func roundTrip(t *testing.T, v any, decode func([]byte) (any, error)) {
	t.Helper()
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("an accepted value does not encode: %v", err)
	}
	again, err := decode(first)
	if err != nil {
		t.Fatalf("the encoding of an accepted value is refused: %v\n%s", err, first)
	}
	second, err := json.Marshal(again)
	if err != nil || !bytes.Equal(first, second) {
		t.Fatalf("encoding and decoding changed the value:\n%s\n%s", first, second)
	}
}

// TestForeignEntriesAreRefused puts entries no worker writes into the
// buckets: a member entry that does not decode or names another member is
// left out of the members, and a spec of another name is refused with a
// reason and what to do.
func TestForeignEntriesAreRefused(t *testing.T) {
	ctx := context.Background()
	m, err := NewMemoryMembers(MembersConfig{HeartbeatEvery: 50 * time.Millisecond, DeadAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Join(ctx, Member{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	defer m.Leave(ctx, "w1")
	for key, value := range map[string]string{"junk": "{not json", "w9": `{"name":"w1"}`, "w_8": `{"name":"w 8"}`} {
		if _, err := m.b.create(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := m.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "w1" {
		t.Fatalf("List = %+v, %v; want only w1", list, err)
	}
	r := &registry{b: newMemBucket(0)}
	if _, err := r.b.create(ctx, "wc", []byte(`{"name":"other","guarantee":"at-least-once","state":"running"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Get(ctx, "wc"); err == nil || !strings.Contains(err.Error(), `names topology "other"`) || !strings.Contains(err.Error(), "submit the topology again") {
		t.Fatalf("Get of a spec under another name: %v", err)
	}
}

func FuzzDecodeSpoutPosition(f *testing.F) {
	good, _ := json.Marshal(SpoutPosition{Topology: "wc", Task: 0, Submitted: time.Unix(1e9, 0).UTC(), Position: []byte{1, 2, 3}})
	for _, seed := range []string{
		string(good),
		`{"topology":"wc","task":-1,"submitted":"2026-01-01T00:00:00Z"}`,
		`{"topology":"a.b","task":0,"submitted":"2026-01-01T00:00:00Z"}`,
		`{"topology":"wc","task":0}`,
		`{"topology":"wc","task":0,"submitted":"2026-01-01T00:00:00Z","position":"!!"}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		p, err := DecodeSpoutPosition(value)
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("a refused position's error does not wrap ErrInvalidEntry: %v", err)
			}
			return
		}
		if checkName("topology", p.Topology) != nil || p.Task < 0 || p.Submitted.IsZero() {
			t.Fatalf("decode accepted %+v", p)
		}
		roundTrip(t, p, func(b []byte) (any, error) { return DecodeSpoutPosition(b) })
	})
}
