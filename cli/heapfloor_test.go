package cli

import "testing"

// TestHeapFloorSetting: ACKFLOW_HEAP_FLOOR takes bytes or KiB/MiB/GiB, 0
// turns the floor off, empty is the default, and anything else is an
// error that says what to give.
func TestHeapFloorSetting(t *testing.T) {
	for v, want := range map[string]uint64{"": defaultHeapFloor, "0": 0, "1048576": 1 << 20, "64MiB": 64 << 20, "1GiB": 1 << 30, "512KiB": 512 << 10, "100B": 100, "8 MiB": 8 << 20} {
		if got, err := heapFloor(v); err != nil || got != want {
			t.Errorf("heapFloor(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"lots", "-1", "1.5GiB", "MiB", "99999999999GiB", "256MB"} {
		if _, err := heapFloor(v); err == nil {
			t.Errorf("heapFloor(%q) accepted it", v)
		}
	}
}
