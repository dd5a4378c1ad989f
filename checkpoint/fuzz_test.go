package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/ackflow/ackflow/checkpoint"
)

// FuzzReadManifest stores arbitrary bytes as the manifest of epoch 3 and
// reads it back. ReadManifest must not panic; it either refuses the bytes
// with ErrCorrupt or returns a manifest of this topology and epoch whose
// every task names its own object. With sum set, the fuzzer's bytes get a
// valid checksum line, so that the JSON behind the checksum is fuzzed too.
func FuzzReadManifest(f *testing.F) {
	s := checkpoint.NewMemory()
	commitEpochs(f, s, 1, 3)
	good, err := s.Get(context.Background(), manifestName(3))
	if err != nil {
		f.Fatal(err)
	}
	body := good[:bytes.LastIndex(good[:len(good)-1], []byte("\n"))]
	f.Add(good, false)
	f.Add(body, true)
	f.Add(good[:len(good)/2], false)
	for _, seed := range []string{
		`{"topology":"wordcount","epoch":3}`,
		`{"topology":"wordcount","epoch":4}`,
		`{"topology":"other","epoch":3}`,
		`{"topology":"wordcount","epoch":3,"tasks":[{"task":0,"object":"wordcount/epoch-00000000000000000003/task-0","size":-1,"sha256":""}]}`,
		`{"topology":"wordcount","epoch":3,"tasks":[{"task":0,"object":"../../etc/passwd","size":1}]}`,
		`{"topology":"wordcount","epoch":3,"tasks":[{"task":-1},{"task":-1}]}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, sum bool) {
		if sum {
			h := sha256.Sum256(data)
			data = append(bytes.Clone(data), "\nsha256 "+hex.EncodeToString(h[:])+"\n"...)
		}
		s := checkpoint.NewMemory()
		if err := s.Put(context.Background(), manifestName(3), data); err != nil {
			t.Fatal(err)
		}
		m, err := checkpoint.ReadManifest(context.Background(), s, topo, 3)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("a damaged manifest gave %v, not ErrCorrupt", err)
			}
			return
		}
		if m.Topology != topo || m.Epoch != 3 {
			t.Fatalf("ReadManifest accepted the manifest of epoch %d of %q", m.Epoch, m.Topology)
		}
		seen := map[int]bool{}
		for _, task := range m.Tasks {
			if task.Object != taskName(3, task.Task) || seen[task.Task] || task.Size < 0 {
				t.Fatalf("ReadManifest accepted task entry %+v", task)
			}
			seen[task.Task] = true
		}
	})
}
