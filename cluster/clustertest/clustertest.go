// Package clustertest is the conformance suite for the primitives of package
// cluster: Members, Registry, Generations, Elector and Positions. Every implementation
// runs it, so that local mode (in memory) and a cluster (JetStream KV)
// behave alike, expiries and compare-and-set conflicts included. It is a
// non-test package so that implementations outside this module can run it
// too.
//
// The cases that stop heartbeats or renewals without ending a Join or a
// Campaign need the implementation to implement MembersControl or
// ElectorControl; they are skipped for one that does not.
package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

// Timing is the liveness timing the suite opens Members and Electors with:
// short, so that expiries take about a second.
var Timing = cluster.MembersConfig{HeartbeatEvery: 300 * time.Millisecond, DeadAfter: time.Second}

// Granularity is how much later than DeadAfter the suite accepts an expiry:
// a JetStream server removes expired keys from a timer, not at the instant
// (DESIGN.md section 7 measured 0.3 s), and a loaded test machine adds to
// that. It is generous on purpose; the cases log what they measured.
const Granularity = 2 * time.Second

// MembersControl is implemented by Members that can stop a member's
// heartbeats without ending its Join, as messages lost on the way would.
type MembersControl interface {
	Pause(name string) error
	Resume(name string) error
}

// ElectorControl is implemented by Electors that can hold back a campaign:
// Pause cuts it off from the store while its clock runs; Freeze stops it
// altogether, as a stopped process; Resume undoes either.
type ElectorControl interface {
	Pause(topology, member string)
	Freeze(topology, member string)
	Resume(topology, member string)
}

// cases runs each case as a subtest.
func cases[O any](t *testing.T, open O, list []namedCase[O]) {
	for _, c := range list {
		t.Run(c.name, func(t *testing.T) { c.run(t, open) })
	}
}

type namedCase[O any] struct {
	name string
	run  func(t *testing.T, open O)
}

// receive returns the first value from ch for which ok is true, and how
// long it took; it fails the test after timeout or if ch closes.
func receive[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string, ok func(T) bool) (T, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case v, open := <-ch:
			if !open {
				t.Fatalf("the watch closed while waiting for %s", what)
			}
			if ok(v) {
				return v, time.Since(start)
			}
		case <-deadline.C:
			var zero T
			t.Fatalf("no %s within %v", what, timeout)
			return zero, 0
		}
	}
}

// quiet fails the test if ch sends anything within d.
func quiet[T any](t *testing.T, ch <-chan T, d time.Duration, why string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("the watch sent %v within %v; %s", v, d, why)
	case <-time.After(d):
	}
}

// closes fails the test unless ch closes within d, ignoring what it sends.
func closes[T any](t *testing.T, ch <-chan T, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-deadline:
			t.Fatalf("the watch did not close within %v of the end of its context", d)
		}
	}
}

func background(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
