package hugepages

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ackflow/ackflow/internal/heapfloor"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never\n": "always",
		"always madvise [never]\n": "never",
		"":                         "",
		"always madvise never\n":   "",
		"] [":                      "",
	} {
		if got := parseMode([]byte(in)); got != want {
			t.Errorf("parseMode(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHeapSpans: only private writable anonymous mappings inside the range
// count; the binary, named mappings, reservations and memory outside the
// range do not.
func TestHeapSpans(t *testing.T) {
	maps := `00400000-00e7e000 r-xp 00000000 fd:01 1234                       /usr/bin/ackflow
02558000-0459e000 rw-p 00000000 00:00 0
26557000-26578000 rw-p 00000000 00:00 0                                  [heap]
12220000000-12221800000 ---p 00000000 00:00 0
12221800000-1222e400000 rw-p 00000000 00:00 0
1222e400000-12230000000 rw-p 00000000 00:00 0
12230000000-12234000000 rw-s 00000000 00:05 77                         /dev/shm/x
13ff0000000-14010000000 rw-p 00000000 00:00 0
7f5680000000-7f5680021000 rw-p 00000000 00:00 0
7ffc1e0c3000-7ffc1e0e4000 rw-p 00000000 00:00 0                          [stack]
`
	got, err := heapSpans([]byte(maps), 0x10000000000, 0x14000000000)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{0x12221800000, 0x1222e400000}, {0x1222e400000, 0x12230000000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("heapSpans = %x, want %x", got, want)
	}
	for _, bad := range []string{"garbage\n", "zz-12 rw-p 00000000 00:00 0\n", "2000-1000 rw-p 00000000 00:00 0\n", "1000 rw-p 00000000 00:00 0\n"} {
		if _, err := heapSpans([]byte(bad), 0, ^uintptr(0)); err == nil {
			t.Errorf("heapSpans(%q) accepted it", bad)
		}
	}
}

// vmFlags returns the VmFlags of the mapping that holds addr, from
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		// A mapping's block starts with its range, "lo-hi perms ...".
		if f := strings.Fields(line); len(f) > 1 && !strings.HasSuffix(f[0], ":") {
			in = mappingHolds(f[0], addr)
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line
		}
	}
	t.Fatalf("no mapping in /proc/self/smaps holds %#x", addr)
	return ""
}

// mappingHolds reports whether the range "lo-hi" (hex) holds addr.
func mappingHolds(r string, addr uintptr) bool {
	s, err := heapSpans([]byte(r+" rw-p 00000000 00:00 0\n"), 0, ^uintptr(0))
	return err == nil && len(s) == 1 && addr >= s[0].lo && addr < s[0].hi
}

func advised(t *testing.T, addr uintptr) bool {
	return strings.Contains(vmFlags(t, addr)+" ", " hg ")
}

// TestStartAdvisesTheHeap: after Start the heap's memory is advised for
// huge pages (VmFlags "hg"), memory it maps later is advised by a later
// pass, and with a reserve an allocation made right after Start lands in
// memory advised already.
func TestStartAdvisesTheHeap(t *testing.T) {
	if m := Mode(); m != "madvise" {
		t.Skipf("transparent huge pages are %q here, not \"madvise\": Start has nothing to do", m)
	}
	a, err := Start(time.Hour, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The reserve was freed; an allocation of 16 MiB fits in its memory,
	// and no second pass runs for an hour.
	early := make([]byte, 16<<20)
	early[0] = 1
	if !advised(t, uintptr(unsafe.Pointer(&early[0]))) {
		t.Errorf("an allocation right after Start is not in advised memory: %s", vmFlags(t, uintptr(unsafe.Pointer(&early[0]))))
	}
	if !advised(t, uintptr(unsafe.Pointer(heapProbe))) {
		t.Errorf("the heap probe's memory is not advised: %s", vmFlags(t, uintptr(unsafe.Pointer(heapProbe))))
	}
	a.Stop()
	a.Stop() // stopping twice is fine

	// Grow the heap past everything mapped so far; a pass every 10 ms
	// advises the new memory.
	b, err := Start(10*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	var held [][]byte
	for range 8 {
		held = append(held, make([]byte, 32<<20))
	}
	late := held[len(held)-1]
	deadline := time.Now().Add(5 * time.Second)
	for !advised(t, uintptr(unsafe.Pointer(&late[0]))) {
		if time.Now().After(deadline) {
			t.Fatalf("memory the heap mapped after Start was not advised within 5 s: %s", vmFlags(t, uintptr(unsafe.Pointer(&late[0]))))
		}
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(early)
	runtime.KeepAlive(held)
}

func TestNilAdvisorStops(t *testing.T) {
	var a *Advisor
	a.Stop()
}

// resident is the process's resident memory in bytes, from
// /proc/self/statm.
func resident(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm here: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("unexpected /proc/self/statm: %q", b)
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("unexpected /proc/self/statm: %q", b)
	}
	return pages * uint64(os.Getpagesize())
}

// TestPrefaultLeavesTheHeapResident: set up as the ackflow binary does (a
// heap floor, and the heap advised for huge pages where the system wants
// that), a heap that grows to the floor a while after Prefault finds its
// memory resident already (the faults happened in Prefault, and the
// runtime kept the memory), while without Prefault growing makes that
// much more memory resident. Resident memory counts pages whatever their
// size, so the test holds with or without huge pages. Each case runs in a
// fresh process of the test binary, whose heap no other test has grown.
func TestPrefaultLeavesTheHeapResident(t *testing.T) {
	if raceEnabled {
		// The race detector's shadow memory comes and goes with the
		// heap's, so resident memory says nothing under it; the README's
		// test command runs everything under it, so the test runs itself
		// again without it.
		goTool, err := exec.LookPath("go")
		if err != nil {
			t.Skipf("under the race detector and no go command to run the test without it: %v", err)
		}
		out, err := exec.Command(goTool, "test", "-count=1", "-run", "^TestPrefaultLeavesTheHeapResident$", "-v", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("without the race detector: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestPrefaultLeavesTheHeapResident") {
			t.Fatalf("without the race detector the test did not run:\n%s", out)
		}
		t.Logf("without the race detector:\n%s", out)
		return
	}
	if mode := os.Getenv(prefaultCase); mode != "" {
		prefaultChild(t, mode == "prefault")
		return
	}
	for _, mode := range []string{"prefault", "none"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestPrefaultLeavesTheHeapResident$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), prefaultCase+"="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("the %s case failed: %v\n%s", mode, err, out)
		} else {
			t.Logf("the %s case:\n%s", mode, out)
		}
	}
	if Prefault(0) != 0 {
		t.Error("Prefault(0) did something")
	}
}

// prefaultCase names the case a child process of
// TestPrefaultLeavesTheHeapResident runs.
const prefaultCase = "HUGEPAGES_TEST_PREFAULT_CASE"

func prefaultChild(t *testing.T, prefault bool) {
	const n = 128 << 20
	floor := heapfloor.Start(n, 400)
	defer floor.Stop()
	a, err := Start(50*time.Millisecond, n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if prefault {
		d := Prefault(n)
		t.Logf("Prefault(%d MiB) took %v", n>>20, d)
	}
	// Long enough for the runtime to give back memory it does not keep:
	// with a collection forced after the touching, most of it was gone
	// within 50 ms in a test, within a second in a worker; after 300 ms
	// the test missed it once in five runs.
	time.Sleep(time.Second)
	before := resident(t)
	touch(n) // as a run's allocations grow the heap to its goal
	grew := int64(resident(t)) - int64(before)
	t.Logf("growing the heap to the floor a second later made %d MiB more resident", grew>>20)
	switch {
	case prefault && grew > n/4:
		t.Errorf("after Prefault, want under %d MiB", n>>22)
	case !prefault && grew < n/2:
		t.Errorf("without Prefault, want %d MiB or more: the test cannot tell Prefault's effect here", n>>21)
	}
}
