//go:build race

package hugepages

// raceEnabled says the tests run under the race detector, whose shadow
// memory is faulted in and released with the heap's own.
const raceEnabled = true
