package cluster_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/cluster"
	"github.com/ackflow/ackflow/cluster/clustertest"
	"github.com/ackflow/ackflow/embednats/natstest"
)

func TestMemoryMembersConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunMembers(t, func(t *testing.T, cfg cluster.MembersConfig) cluster.Members {
		m, err := cluster.NewMemoryMembers(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

func TestKVMembersConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunMembers(t, func(t *testing.T, cfg cluster.MembersConfig) cluster.Members {
		m, err := cluster.NewKVMembers(context.Background(), caseJetStream(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	})
}

func TestMemoryRegistryConforms(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunRegistry(t, func(t *testing.T) cluster.Registry { return cluster.NewMemoryRegistry() })
}

func TestKVRegistryConforms(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunRegistry(t, func(t *testing.T) cluster.Registry {
		r, err := cluster.NewKVRegistry(context.Background(), caseJetStream(t))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}

func TestMemoryGenerationsConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunGenerations(t, func(t *testing.T) cluster.Generations { return cluster.NewMemoryGenerations() })
}

func TestKVGenerationsConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunGenerations(t, func(t *testing.T) cluster.Generations {
		g, err := cluster.NewKVGenerations(context.Background(), caseJetStream(t))
		if err != nil {
			t.Fatal(err)
		}
		return g
	})
}

func TestMemoryPositionsConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunPositions(t, func(t *testing.T) cluster.Positions { return cluster.NewMemoryPositions() })
}

func TestKVPositionsConform(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunPositions(t, func(t *testing.T) cluster.Positions {
		p, err := cluster.NewKVPositions(context.Background(), caseJetStream(t))
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
}

func TestMemoryElectorConforms(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunElector(t, func(t *testing.T, cfg cluster.MembersConfig) cluster.Elector {
		e, err := cluster.NewMemoryElector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

func TestKVElectorConforms(t *testing.T) {
	defer goleak.VerifyNone(t)
	clustertest.RunElector(t, func(t *testing.T, cfg cluster.MembersConfig) cluster.Elector {
		e, err := cluster.NewKVElector(context.Background(), caseJetStream(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

// caseJetStream starts a server of its own for one conformance case, so
// that no goroutine or key of one case reaches the next. It stops with the
// case (t.Cleanup of the subtest), which is before the parent test's
// deferred goleak check runs.
func caseJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, stop := startJetStream(t)
	t.Cleanup(stop)
	return js
}

// startJetStream starts an embedded server with JetStream; stop closes it.
func startJetStream(t *testing.T) (jetstream.JetStream, func()) { return natstest.JetStream(t) }
