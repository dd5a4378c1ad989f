package deadletter_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/deadletter/sinktest"
	"github.com/ackflow/ackflow/embednats/natstest"
)

func TestMemoryConforms(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (deadletter.Sink, func() []deadletter.Letter) {
		m := deadletter.NewMemory()
		return m, m.Letters
	})
}

func TestFileConforms(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) (deadletter.Sink, func() []deadletter.Letter) {
		f := deadletter.NewFile(filepath.Join(t.TempDir(), "dead.jsonl"))
		return f, func() []deadletter.Letter {
			letters, err := deadletter.ReadFile(f.Path())
			if errors.Is(err, fs.ErrNotExist) {
				return nil // nothing was put: the file is created at the first letter
			}
			if err != nil {
				t.Fatal(err)
			}
			return letters
		}
	})
}

func TestJetStreamConforms(t *testing.T) {
	js := startJetStream(t)
	var n atomic.Int64
	sinktest.Run(t, func(t *testing.T) (deadletter.Sink, func() []deadletter.Letter) {
		topology := fmt.Sprintf("case%d", n.Add(1)) // a stream per case
		s, err := deadletter.NewJetStream(context.Background(), js, topology)
		if err != nil {
			t.Fatal(err)
		}
		return s, func() []deadletter.Letter {
			letters, err := deadletter.ReadJetStream(context.Background(), js, topology)
			if err != nil {
				t.Fatal(err)
			}
			return letters
		}
	})
}

// startJetStream starts an embedded server and connects to it. Both stop
// when t ends, and goleak then checks that nothing they or the sinks started
// is still running (cleanups run last-in first-out, so the check is
// registered first).
func startJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	js, stop := natstest.JetStream(t)
	t.Cleanup(stop)
	return js
}
