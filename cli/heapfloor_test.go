package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

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

// TestPrefaultHeap: a worker prefaults the heap floor and says so in its
// log, unless there is no floor or ACKFLOW_PREFAULT=0.
func TestPrefaultHeap(t *testing.T) {
	defer func(f uint64) { heapFloorBytes = f }(heapFloorBytes)
	for _, c := range []struct {
		floor uint64
		env   string
		logs  bool
	}{{4 << 20, "", true}, {4 << 20, "1", true}, {4 << 20, "0", false}, {0, "", false}} {
		heapFloorBytes = c.floor
		t.Setenv("ACKFLOW_PREFAULT", c.env)
		var buf bytes.Buffer
		prefaultHeap(zerolog.New(&buf))
		if got := strings.Contains(buf.String(), `"MiB":4`) && strings.Contains(buf.String(), "prefaulted"); got != c.logs {
			t.Errorf("floor %d, ACKFLOW_PREFAULT=%q: logged %q, want a prefault line: %v", c.floor, c.env, buf.String(), c.logs)
		}
	}
}
