// Package chaos injects the failures of DESIGN.md section 2 into a running
// topology: it drops, duplicates, delays and reorders the frames a task
// sends, and tells the runtime when to crash a worker. Every decision comes
// from a seeded generator per sending task, so a chaos setting with the same
// seed makes the same choices for the same sequence of sends.
//
// It is used by tests, by the test harness in package flowtest, and by users
// through `ackflow run ... --chaos "drop=0.05,dup=0.01,delay=2ms,seed=7"`.
package chaos
