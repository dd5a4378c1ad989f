// Package workers is the process that hosts tasks: it places tasks on
// workers, runs each task in its own goroutine with a bounded inbox, batches
// records per destination task, carries them over NATS (or hands them over
// in memory when both tasks live in the same worker), and runs the acking
// protocol of package acker on top.
//
// RunLocal runs a whole topology in one process: an embedded NATS server and
// N logical workers, each with its own NATS connection, so records really
// cross NATS. A bounded run (spouts that return topology.ErrExhausted) ends
// when every spout is exhausted and everything in flight is processed.
//
// Lock ordering: no executor holds a lock while it sends; Worker.mu guards
// the task table and is never held across a NATS call.
package workers
