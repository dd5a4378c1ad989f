package hugepages

import (
	"os"
	"syscall"
)

func mode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	return parseMode(b)
}

func readMaps() ([]byte, error) { return os.ReadFile("/proc/self/maps") }

// madvHugepage is MADV_HUGEPAGE.
const madvHugepage = 14

func madviseHuge(addr, n uintptr) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, n, madvHugepage); errno != 0 {
		return errno
	}
	return nil
}
