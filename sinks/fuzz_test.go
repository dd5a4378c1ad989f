package sinks

import (
	"testing"
	"time"

	"github.com/ackflow/ackflow/topology"
)

// FuzzJetStreamRestore feeds arbitrary bytes to the JetStream sink's
// Restore, which reads what a checkpoint holds of its outputs. It must not
// panic; a refusal must leave nothing half restored; what it accepts must
// snapshot again to the same outputs.
func FuzzJetStreamRestore(f *testing.F) {
	tc := topology.TaskContext{Component: "out", Guarantee: "exactly-once", CheckpointEvery: time.Second}
	src := &JetStream{tc: tc,
		batches: []walBatch{{epoch: 3, msgs: []walMsg{{id: 1, subject: "a", data: []byte("x")}, {id: 2, subject: "b.c"}}}, {epoch: 4}},
		open:    []walMsg{{id: 9, subject: "a", data: []byte("[\"the\",3]")}}}
	addSnapshotSeeds(f, src)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &JetStream{tc: tc, batches: []walBatch{{epoch: 1, msgs: []walMsg{{id: 7}}}}}
		if err := s.Restore(data); err != nil {
			if len(s.batches) != 1 || s.batches[0].epoch != 1 {
				t.Fatalf("a refused snapshot changed the sink's batches to %+v", s.batches)
			}
			return
		}
		if len(data) == 0 {
			return
		}
		again, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		// Snapshot adds the (empty) epoch in progress as one more batch.
		r := &JetStream{tc: tc}
		if err := r.Restore(again); err != nil {
			t.Fatalf("the snapshot of a restored sink is refused: %v", err)
		}
		if len(r.batches) != len(s.batches)+1 || len(r.batches[len(r.batches)-1].msgs) != 0 {
			t.Fatalf("restored %d batches, snapshot again gave %d", len(s.batches), len(r.batches))
		}
		for i, b := range s.batches {
			if len(r.batches[i].msgs) != len(b.msgs) || r.batches[i].epoch != b.epoch {
				t.Fatalf("batch %d changed from %+v to %+v", i, b, r.batches[i])
			}
			for j, m := range b.msgs {
				got := r.batches[i].msgs[j]
				if got.id != m.id || got.subject != m.subject || string(got.data) != string(m.data) {
					t.Fatalf("output %d of batch %d changed from %+v to %+v", j, i, m, got)
				}
			}
		}
	})
}

// FuzzFileRestore feeds arbitrary bytes to the file sink's Restore, which
// reads the pending files a checkpoint names. It must not panic; what it
// accepts names a token of 8 hex digits, and a refusal restores nothing.
func FuzzFileRestore(f *testing.F) {
	src := &File{checkpointed: true, token: "0123abcd", precommitted: []uint64{4, 7}}
	addSnapshotSeeds(f, src)
	f.Add([]byte{8, 'z', 'z', 'z', 'z', 'z', 'z', 'z', 'z', 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &File{}
		if err := s.Restore(data); err != nil {
			if s.restored != nil {
				t.Fatalf("a refused snapshot restored %+v", s.restored)
			}
			return
		}
		if len(data) == 0 {
			return
		}
		if !isToken(s.restored.token) {
			t.Fatalf("restored token %q", s.restored.token)
		}
		again := &File{checkpointed: true, token: s.restored.token}
		for _, e := range s.restored.epochs {
			if e != 0 {
				again.precommitted = append(again.precommitted, e)
			}
		}
		b, _ := again.Snapshot()
		r := &File{}
		if err := r.Restore(b); err != nil {
			t.Fatalf("the snapshot of a restored sink is refused: %v", err)
		}
	})
}

// addSnapshotSeeds seeds f with src's snapshot, the same cut short, and
// nothing.
func addSnapshotSeeds(f *testing.F, src topology.Stateful) {
	good, err := src.Snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte{})
}
