// Package deadletter is where the runtime puts the source records it has
// given up on. A spout's root that failed too many times stops being
// replayed and becomes a Letter: its position, its values and the last error,
// written to a Sink (a JSON-lines file, a JetStream stream, or memory in
// tests) where a person can see it and later re-inject it. It exists so that
// nothing the runtime drops vanishes without a trace (DESIGN.md section 6b).
//
// Letters are JSON with every value tagged by its Go type, so a re-injected
// record is exactly the record that failed: Read, ReadFile and ReadJetStream
// return what the sinks stored. Package sinktest is the conformance suite
// every Sink passes.
package deadletter
