//go:build !linux

package hugepages

import "errors"

func mode() string { return "" }

var errNotLinux = errors.New("transparent huge pages are a Linux feature")

func readMaps() ([]byte, error) { return nil, errNotLinux }

func madviseHuge(addr, n uintptr) error { return errNotLinux }
