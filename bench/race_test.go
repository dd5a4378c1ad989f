//go:build race

package bench

// raceEnabled says the tests run under the race detector, which makes
// ackflow about ten times slower.
const raceEnabled = true
