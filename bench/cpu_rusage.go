//go:build linux || darwin

package bench

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system: every
// task's and, in the suite, the embedded NATS server's. ok is false when
// the system does not say.
func processCPU() (cpu time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
