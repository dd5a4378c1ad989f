package sinks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ackflow/ackflow/topology"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Exactly-once with checkpoints, the JetStream sink writes ahead: it keeps
// what each epoch publishes in its checkpointed state and publishes it
// when the epoch's checkpoint is complete (Commit), or when a restarted
// task restores that checkpoint (Recover). Publishing every input at once
// and relying on Nats-Msg-Id alone is exactly once only for outputs that
// a replay reproduces byte for byte; a running count is not one of them:
// after a rollback the inputs of two upstream tasks interleave otherwise,
// the same record can carry another count, and the stream would hold one
// count twice and miss another. Writing ahead publishes only what a
// complete checkpoint holds, and Nats-Msg-Id makes publishing it again
// harmless.

var (
	_ topology.Transactional = (*JetStream)(nil)
	_ topology.Stateful      = (*JetStream)(nil)
)

// walMsg is one output held until its epoch commits.
type walMsg struct {
	id      uint64
	subject string
	data    []byte
}

// walBatch is what one epoch published.
type walBatch struct {
	epoch uint64
	msgs  []walMsg
}

// writesAhead reports whether the task holds outputs until their epoch
// commits: exactly-once with checkpoints.
func (s *JetStream) writesAhead() bool {
	return s.tc.Guarantee == "exactly-once" && s.tc.CheckpointEvery > 0
}

// hold keeps in's output for the epoch in progress and acks in: the
// checkpoint that ends the epoch carries it.
func (s *JetStream) hold(in *topology.Tuple) {
	subject, data, ok := s.message(in)
	if !ok {
		return
	}
	s.open = append(s.open, walMsg{id: in.ID, subject: subject, data: data})
	s.out.Ack(in)
}

// Snapshot returns the outputs not yet published: the batches of earlier
// epochs whose commit has not happened, and the epoch in progress (epoch
// 0 in the snapshot: the epoch the snapshot is taken for).
func (s *JetStream) Snapshot() ([]byte, error) {
	if !s.writesAhead() {
		return nil, nil
	}
	b := binary.AppendUvarint(nil, uint64(len(s.batches)+1))
	for _, bt := range append(s.batches, walBatch{msgs: s.open}) {
		b = binary.AppendUvarint(b, bt.epoch)
		b = binary.AppendUvarint(b, uint64(len(bt.msgs)))
		for _, m := range bt.msgs {
			b = binary.BigEndian.AppendUint64(b, m.id)
			b = appendString(b, m.subject)
			b = appendString(b, string(m.data))
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Restore takes back what a checkpoint held; Recover publishes it.
func (s *JetStream) Restore(snapshot []byte) error {
	if len(snapshot) == 0 {
		return nil
	}
	r := &reader{b: snapshot}
	n := r.uvarint()
	var batches []walBatch
	for i := uint64(0); i < n && r.err == nil; i++ {
		bt := walBatch{epoch: r.uvarint()}
		k := r.uvarint()
		for j := uint64(0); j < k && r.err == nil; j++ {
			id := r.uint64()
			subject := r.string()
			data := []byte(r.string())
			bt.msgs = append(bt.msgs, walMsg{id: id, subject: subject, data: data})
		}
		batches = append(batches, bt)
	}
	if r.err != nil || len(r.b) > 0 {
		return fmt.Errorf("sinks: the checkpointed outputs of %s task %d do not decode; the checkpoint is damaged", s.tc.Component, s.tc.Index)
	}
	s.batches = batches
	return nil
}

// PreCommit ends the epoch in progress: its outputs become epoch's batch.
func (s *JetStream) PreCommit(epoch uint64) error {
	if !s.writesAhead() {
		return nil
	}
	s.batches = append(s.batches, walBatch{epoch: epoch, msgs: s.open})
	s.open = nil
	return nil
}

// Commit publishes the batches of epoch and every earlier one and waits
// for the stream to store them. A failure leaves them for the next Commit
// or Recover; publishing again is harmless (Nats-Msg-Id).
func (s *JetStream) Commit(epoch uint64) error {
	if !s.writesAhead() {
		return nil
	}
	var keep []walBatch
	var due []walMsg
	for _, bt := range s.batches {
		if bt.epoch <= epoch {
			due = append(due, bt.msgs...)
		} else {
			keep = append(keep, bt)
		}
	}
	err := s.publishAll(due)
	s.settle() // forget the answers, which match no input
	if err != nil {
		return fmt.Errorf("sinks: committing epoch %d to stream %s: %w; the next commit publishes it again", epoch, s.cfg.Stream, err)
	}
	s.batches = keep
	return nil
}

// Recover publishes what the restored checkpoint held: its epoch is
// complete, so its outputs are due. Batches of later epochs cannot be in
// it. The epoch in progress when it was taken (0 in the snapshot) is
// epoch itself.
func (s *JetStream) Recover(epoch uint64) error {
	if !s.writesAhead() || len(s.batches) == 0 {
		return nil
	}
	for i := range s.batches {
		if s.batches[i].epoch == 0 {
			s.batches[i].epoch = epoch
		}
	}
	return s.Commit(epoch)
}

// publishAll publishes msgs with their IDs, MaxInFlight at a time, and
// waits for every PubAck.
func (s *JetStream) publishAll(msgs []walMsg) error {
	if len(msgs) == 0 {
		return nil
	}
	var futures []jetstream.PubAckFuture
	wait := func() error {
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Stream != s.cfg.Stream {
					return fmt.Errorf("stored in stream %s, which captures the subject too: fix SubjectOf or the streams' subjects", ack.Stream)
				}
			case err := <-f.Err():
				return err
			case <-time.After(s.cfg.AckTimeout + time.Second):
				return errors.New("no PubAck within the ack timeout")
			}
		}
		futures = futures[:0]
		return nil
	}
	for _, m := range msgs {
		msg := &nats.Msg{Subject: m.subject, Data: m.data, Header: nats.Header{jetstream.MsgIDHeader: []string{msgID(m.id, m.subject, m.data)}}}
		f, err := s.js.PublishMsgAsync(msg)
		if err != nil {
			return err
		}
		if futures = append(futures, f); len(futures) >= s.cfg.MaxInFlight {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// reader decodes a snapshot.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) uint64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.err = errors.New("short")
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil || uint64(len(r.b)) < n {
		r.err = errors.New("short")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
