// Package embednats runs a NATS server with JetStream inside the current
// process. Local mode, `ackflow nats`, the benchmarks and the tests all start
// their server through it, so every one of them talks to the same server
// configuration over a real TCP socket.
package embednats
