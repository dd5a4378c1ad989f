// Package checkpoint is where a topology's checkpoints live (DESIGN.md
// section 8): the snapshots of its tasks, the manifests that make an epoch
// complete, and the restore that finds the latest epoch a run can go back
// to. It will also hold the coordinator that pauses the spouts and takes the
// snapshots; what is here now is the storage layer under it.
//
// A checkpoint of epoch n is one object per task, written with WriteTask,
// then a manifest written last by Commit: an epoch without a manifest is
// incomplete and never restored. The manifest records the size and SHA-256
// of every task object and carries a checksum of its own, so a missing,
// truncated or corrupted checkpoint is refused with an error that says
// which object is wrong, and Latest falls back to the previous complete
// epoch. Corruption is outside the failure model only because it is
// detected, never because it is assumed not to happen.
//
// Objects live in a Store: a local directory (Dir) in local mode, a
// JetStream object store bucket (ObjectStore) in cluster mode, or memory
// (Memory) in tests. Package storetest is the conformance suite every Store
// passes.
package checkpoint
