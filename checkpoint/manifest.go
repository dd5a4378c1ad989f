package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Manifest describes one complete checkpoint epoch.
type Manifest struct {
	Topology    string        `json:"topology"`
	Fingerprint string        `json:"fingerprint"` // of the topology's shape; restoring into another shape is refused
	Epoch       uint64        `json:"epoch"`
	Started     time.Time     `json:"started"`
	Duration    time.Duration `json:"duration_ns"` // from pause to manifest
	Pause       time.Duration `json:"pause_ns"`    // how long the spouts were paused
	Tasks       []TaskEntry   `json:"tasks"`
}

// TaskEntry describes the snapshot of one task in a Manifest. WriteTask
// returns it; a spout's caller sets Position before Commit.
type TaskEntry struct {
	Task      int    `json:"task"`
	Component string `json:"component"`
	Index     int    `json:"index"`
	Object    string `json:"object"` // name in the store
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`             // hex, of the object
	Position  []byte `json:"position,omitempty"` // spouts: the source position, for people (inspect)
}

// EpochPrefix is the start of the names of epoch's objects:
// "<topology>/epoch-<epoch, 20 digits>/". The fixed width makes names sort
// in the order of their epochs.
func EpochPrefix(topology string, epoch uint64) string {
	return fmt.Sprintf("%s/epoch-%020d/", topology, epoch)
}

const manifestBase = "MANIFEST"

func manifestObject(topology string, epoch uint64) string {
	return EpochPrefix(topology, epoch) + manifestBase
}

func taskObject(topology string, epoch uint64, task int) string {
	return EpochPrefix(topology, epoch) + "task-" + strconv.Itoa(task)
}

// parseObject splits the name of an object of topology into its epoch and
// the rest ("task-3", "MANIFEST"); ok is false for names this package does
// not write.
func parseObject(topology, name string) (epoch uint64, rest string, ok bool) {
	after, found := strings.CutPrefix(name, topology+"/epoch-")
	if !found || len(after) < 22 || after[20] != '/' {
		return 0, "", false
	}
	epoch, err := strconv.ParseUint(after[:20], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return epoch, after[21:], true
}

// plainName says whether s is letters, digits, '-' and '_': what a topology
// builder allows, and what a bucket name and a single name segment hold.
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !nameByte(c) || c == '.' {
			return false
		}
	}
	return true
}

func checkTopology(topology string) error {
	if !plainName(topology) {
		return fmt.Errorf("checkpoint: topology name %q cannot name checkpoints; use letters, digits, '-' and '_', as the topology builder does", topology)
	}
	return nil
}

// checkEpoch refuses epoch 0, which means "no checkpoint" to the runtime
// (a Transactional sink recovers to epoch 0 when there is none).
func checkEpoch(topology string, epoch uint64) error {
	if err := checkTopology(topology); err != nil {
		return err
	}
	if epoch == 0 {
		return fmt.Errorf("checkpoint: epoch 0 of %s: epochs start at 1, since 0 means no checkpoint", topology)
	}
	return nil
}

func checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// WriteTask stores the snapshot of one task for epoch and returns its entry
// for the manifest, with its size and checksum.
func WriteTask(ctx context.Context, s Store, topology string, epoch uint64, task int, component string, index int, data []byte) (TaskEntry, error) {
	if err := checkEpoch(topology, epoch); err != nil {
		return TaskEntry{}, err
	}
	if task < 0 {
		return TaskEntry{}, fmt.Errorf("checkpoint: task %d of epoch %d of %s: task IDs are not negative", task, epoch, topology)
	}
	e := TaskEntry{
		Task: task, Component: component, Index: index,
		Object: taskObject(topology, epoch, task),
		Size:   int64(len(data)), SHA256: checksum(data),
	}
	// The store's error names the object, and so the epoch and the task.
	if err := s.Put(ctx, e.Object, data); err != nil {
		return TaskEntry{}, err
	}
	return e, nil
}

// ReadTask reads the snapshot e describes and checks it against e's size
// and checksum. A missing, truncated or corrupted object is refused with an
// error wrapping ErrCorrupt; an error of the store itself is returned as it
// is, since it says nothing about the checkpoint.
func ReadTask(ctx context.Context, s Store, e TaskEntry) ([]byte, error) {
	data, err := s.Get(ctx, e.Object)
	if errors.Is(err, ErrNotFound) {
		return nil, badTask(e, err, "is missing")
	}
	if err != nil {
		return nil, err
	}
	switch n := int64(len(data)); {
	case n < e.Size:
		return nil, badTask(e, nil, fmt.Sprintf("is truncated: %d of its %d bytes", n, e.Size))
	case n > e.Size:
		return nil, badTask(e, nil, fmt.Sprintf("has %d bytes where the manifest says %d", n, e.Size))
	case checksum(data) != e.SHA256:
		return nil, badTask(e, nil, "has a bad checksum")
	}
	return data, nil
}

func badTask(e TaskEntry, cause error, why string) error {
	topology, _, _ := strings.Cut(e.Object, "/")
	epoch, _, ok := parseObject(topology, e.Object)
	if !ok {
		return newError(ErrCorrupt, cause, "checkpoint: task %d (%s, index %d), object %s, %s; refusing to restore it", e.Task, e.Component, e.Index, e.Object, why)
	}
	return newError(ErrCorrupt, cause, "checkpoint: task %d (%s, index %d) of epoch %d of %s, object %s, %s; refusing to restore epoch %d",
		e.Task, e.Component, e.Index, epoch, topology, e.Object, why, epoch)
}

// encodeManifest writes m as indented JSON, for people who look at it,
// followed by the line "sha256 <hex of the JSON>": a manifest cut short
// loses that line or its end, and a changed byte breaks the sum.
func encodeManifest(m Manifest) ([]byte, error) {
	j, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: cannot encode the manifest of epoch %d of %s: %w", m.Epoch, m.Topology, err)
	}
	return fmt.Appendf(append(j, '\n'), "sha256 %s\n", checksum(j)), nil
}

// decodeManifest returns the manifest in data, or why data is not one.
func decodeManifest(data []byte) (*Manifest, string) {
	truncated := "is truncated: it does not end with its checksum line"
	body, ok := bytes.CutSuffix(data, []byte("\n"))
	i := bytes.LastIndexByte(body, '\n')
	if !ok || i < 0 {
		return nil, truncated
	}
	j, line := body[:i], string(body[i+1:])
	sum, ok := strings.CutPrefix(line, "sha256 ")
	if !ok {
		return nil, truncated
	}
	if sum != checksum(j) {
		return nil, "has a bad checksum"
	}
	var m Manifest
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, fmt.Sprintf("is not a manifest although its checksum matches (%v)", err)
	}
	return &m, ""
}

// checkTasks returns why tasks cannot be the entries of a manifest of
// epoch, or "". Every entry must name its task's own object of this epoch:
// an entry pointing elsewhere could outlive that object's epoch.
func checkTasks(topology string, epoch uint64, tasks []TaskEntry) string {
	seen := make(map[int]bool, len(tasks))
	for _, t := range tasks {
		switch {
		case t.Object != taskObject(topology, epoch, t.Task):
			return fmt.Sprintf("lists task %d with object %q, which is not that task's object in this epoch", t.Task, t.Object)
		case seen[t.Task]:
			return fmt.Sprintf("lists task %d twice", t.Task)
		case t.Size < 0 || len(t.SHA256) != sha256.Size*2:
			return fmt.Sprintf("has no valid size and checksum for task %d", t.Task)
		}
		seen[t.Task] = true
	}
	return ""
}

// ReadManifest reads the manifest of epoch and verifies its checksum. A
// missing manifest (the epoch is incomplete) gives an error wrapping
// ErrNoCheckpoint; a truncated, corrupted or inconsistent one an error
// wrapping ErrCorrupt. It does not read the task objects.
func ReadManifest(ctx context.Context, s Store, topology string, epoch uint64) (*Manifest, error) {
	if err := checkTopology(topology); err != nil {
		return nil, err
	}
	data, err := s.Get(ctx, manifestObject(topology, epoch))
	if errors.Is(err, ErrNotFound) {
		return nil, incomplete(topology, epoch, err)
	}
	if err != nil {
		return nil, err
	}
	m, why := decodeManifest(data)
	if why == "" && (m.Topology != topology || m.Epoch != epoch) {
		why = fmt.Sprintf("is the manifest of epoch %d of %s (was it copied?)", m.Epoch, m.Topology)
	}
	if why == "" {
		why = checkTasks(topology, epoch, m.Tasks)
	}
	if why != "" {
		return nil, newError(ErrCorrupt, nil, "checkpoint: manifest for epoch %d of %s %s; refusing to restore it", epoch, topology, why)
	}
	return m, nil
}

func incomplete(topology string, epoch uint64, cause error) error {
	return newError(ErrNoCheckpoint, cause, "checkpoint: epoch %d of %s is incomplete: it has no manifest, because its checkpoint did not finish; it cannot be restored", epoch, topology)
}

// Commit makes epoch m.Epoch complete by writing its manifest, after the
// caller has written every task with WriteTask; then it deletes the epochs
// of m.Topology older than the newest keep complete ones, and the
// incomplete epochs older than m. Epochs newer than m are left alone.
//
// An error wrapping ErrRetention means the manifest is written and the
// epoch complete; only the deletion failed, and the next Commit retries it.
func Commit(ctx context.Context, s Store, m Manifest, keep int) error {
	if keep < 1 {
		return fmt.Errorf("checkpoint: cannot commit epoch %d of %s with keep=%d; keep at least 1 complete epoch, or nothing would be left to restore", m.Epoch, m.Topology, keep)
	}
	if err := checkEpoch(m.Topology, m.Epoch); err != nil {
		return err
	}
	if why := checkTasks(m.Topology, m.Epoch, m.Tasks); why != "" {
		return fmt.Errorf("checkpoint: cannot commit epoch %d of %s: the manifest %s; commit the entries WriteTask returned", m.Epoch, m.Topology, why)
	}
	if err := checkWritten(ctx, s, m); err != nil {
		return err
	}
	data, err := encodeManifest(m)
	if err != nil {
		return err
	}
	if err := s.Put(ctx, manifestObject(m.Topology, m.Epoch), data); err != nil {
		return err
	}
	return prune(ctx, s, m, keep)
}

// checkWritten makes sure every task object of m is in the store, so that a
// caller's bug cannot commit an epoch that would only be refused at
// restore. It lists the epoch rather than reading the objects back: they
// were checksummed as they were written.
func checkWritten(ctx context.Context, s Store, m Manifest) error {
	names, err := s.List(ctx, EpochPrefix(m.Topology, m.Epoch))
	if err != nil {
		return err
	}
	stored := make(map[string]bool, len(names))
	for _, name := range names {
		stored[name] = true
	}
	for _, t := range m.Tasks {
		if !stored[t.Object] {
			return fmt.Errorf("checkpoint: cannot commit epoch %d of %s: task %d (%s, index %d) has no object %s in the store; write every task with WriteTask before Commit", m.Epoch, m.Topology, t.Task, t.Component, t.Index, t.Object)
		}
	}
	return nil
}
