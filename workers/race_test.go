//go:build race

package workers_test

// raceEnabled says the tests run under the race detector, which makes
// ackflow about ten times slower.
const raceEnabled = true
