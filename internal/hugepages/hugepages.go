// Package hugepages asks Linux to back the Go heap with transparent huge
// pages (2 MiB) instead of 4 KiB ones, as the JVM's
// -XX:+UseTransparentHugePages does for the Java heap.
//
// Every page of heap memory the process touches for the first time costs a
// page fault, and an ackflow process's heap grows to its goal (256 MiB at
// least with the heap floor) before the first collection: 65,000 faults of
// 4 KiB. On the virtual machines this project is built on a 4 KiB fault
// costs about 12 µs (touching 256 MiB took 0.8 s, and 20-500 ms with the
// memory advised for huge pages). Advised, `ackflow run wordcount` on 40
// copies of its text faulted 30,000-34,000 times instead of 97,000-102,000
// and moved 2.3-2.4 million records/s instead of 1.8-2.0 with a fifth less
// CPU, and the suite's word count on three fresh worker processes 0.69-0.71
// million records/s instead of 0.43-0.44 (docs/design-notes.md, Runtime).
// A process whose heap has grown already (the suite's other rows, run one
// after the other in one process) gains nothing.
//
// The Go runtime advises only some of its own metadata, and on most
// distributions transparent huge pages are on only where asked for
// (/sys/kernel/mm/transparent_hugepage/enabled is "madvise"). So Start
// finds the heap's mappings in /proc/self/maps now and then and advises
// the ones it has not advised yet (the runtime maps the heap in pieces of
// a few MiB as it grows). Where the mode is "always" there is nothing to do,
// and where it is "never" nothing can be done. The cost is memory: a
// partly used 2 MiB page is resident in full.
package hugepages

import (
	"bufio"
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Mode is the system's transparent huge page setting: "always", "madvise"
// or "never", or "" where there is none (not Linux, or no such file).
func Mode() string { return mode() }

// parseMode picks the bracketed choice out of the enabled file's contents,
// "always [madvise] never".
func parseMode(b []byte) string {
	open, close := bytes.IndexByte(b, '['), bytes.IndexByte(b, ']')
	if open < 0 || close < open {
		return ""
	}
	return string(b[open+1 : close])
}

// span is a range of addresses [lo, hi).
type span struct{ lo, hi uintptr }

// heapSpans returns the writable private anonymous mappings of maps (the
// contents of /proc/self/maps) that lie in [lo, hi): where the Go heap is.
func heapSpans(maps []byte, lo, hi uintptr) ([]span, error) {
	var out []span
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("hugepages: unexpected line in /proc/self/maps: %q", sc.Text())
		}
		if f[1] != "rw-p" || f[4] != "0" || len(f) > 5 {
			continue
		}
		from, to, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("hugepages: unexpected range in /proc/self/maps: %q", f[0])
		}
		a, err := strconv.ParseUint(from, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("hugepages: unexpected range in /proc/self/maps: %q", f[0])
		}
		b, err := strconv.ParseUint(to, 16, 64)
		if err != nil || b <= a {
			return nil, fmt.Errorf("hugepages: unexpected range in /proc/self/maps: %q", f[0])
		}
		if uintptr(a) >= lo && uintptr(b) <= hi {
			out = append(out, span{uintptr(a), uintptr(b)})
		}
	}
	return out, sc.Err()
}

// Advisor advises the heap's new mappings for huge pages until Stop.
type Advisor struct {
	lo, hi  uintptr // where the heap's mappings are looked for
	advised []span  // the heap's mappings as of the last pass, all advised
	stop    chan struct{}
	done    chan struct{}
}

// heapProbe is allocated on the heap, so that its address tells where the
// heap is.
var heapProbe *[64]byte

// Start advises the heap's mappings for huge pages at once, and again every
// period until Stop, where the system gives huge pages only to memory
// advised for them (Mode "madvise"). It returns nil, and nothing runs,
// where the mode is anything else. An error means the first pass failed;
// nothing runs then either.
//
// With reserve > 0 the heap is first grown to hold reserve bytes, so that
// the first pass advises that much: the runtime maps the heap a few MiB at
// a time as it grows and allocates from the new memory at once, so a
// heap that grows at run time touches most of its pages before a later
// pass could advise them. The reserve is an allocation of fresh memory,
// which the runtime neither clears nor touches; it is freed at once (one
// collection of the still tiny heap), and the memory stays mapped for the
// heap to grow into. A process whose heap goal starts at reserve bytes
// (the heap floor) grows to it anyway.
func Start(every time.Duration, reserve uint64) (*Advisor, error) {
	if Mode() != "madvise" {
		return nil, nil
	}
	var ballast []byte
	if reserve > 0 {
		ballast = make([]byte, reserve)
	}
	heapProbe = new([64]byte)
	// The runtime places the heap's arenas one after the other upward from
	// a start it picks, not a fixed one (two runs of the binary had it at
	// 0x122_2000_0000 and 0x31ea_06c0_0000): two terabytes from the start
	// of the terabyte the probe lies in cover it, and none of the
	// process's other mappings (binary, thread stacks, libraries) are
	// there.
	const tb = 1 << 40
	lo := uintptr(unsafe.Pointer(heapProbe)) &^ (tb - 1)
	a := &Advisor{lo: lo, hi: lo + 2*tb, stop: make(chan struct{}), done: make(chan struct{})}
	err := a.pass()
	runtime.KeepAlive(ballast)
	if ballast != nil {
		ballast = nil
		runtime.GC()
	}
	if err != nil {
		return nil, err
	}
	go a.loop(every)
	return a, nil
}

// pass advises every heap mapping that the last pass did not see whole.
func (a *Advisor) pass() error {
	maps, err := readMaps()
	if err != nil {
		return err
	}
	spans, err := heapSpans(maps, a.lo, a.hi)
	if err != nil {
		return err
	}
	for _, s := range spans {
		if a.seen(s) {
			continue
		}
		if err := madviseHuge(s.lo, s.hi-s.lo); err != nil {
			return fmt.Errorf("hugepages: madvise of the heap at %#x-%#x: %w", s.lo, s.hi, err)
		}
	}
	// Advised mappings next to each other merge into one, which the next
	// pass sees as new and advises again, once.
	a.advised = spans
	return nil
}

// seen reports whether s lies within a mapping of the last pass.
func (a *Advisor) seen(s span) bool {
	for _, o := range a.advised {
		if s.lo >= o.lo && s.hi <= o.hi {
			return true
		}
	}
	return false
}

func (a *Advisor) loop(every time.Duration) {
	defer close(a.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		// A pass fails only if /proc/self/maps cannot be read or the
		// kernel refuses the advice, and then the next one would too: the
		// heap goes on with the pages it gets.
		if a.pass() != nil {
			return
		}
	}
}

// Stop ends the advising. The advice given stays. A nil Advisor is
// stopped already.
func (a *Advisor) Stop() {
	if a == nil {
		return
	}
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

// Prefault touches n bytes of heap memory that it drops at once, so that
// the page faults of a heap growing to n bytes happen now instead of while
// the process does its work. The heap floor lets a worker's heap grow to
// the floor before its first collection, and each page it touches for the
// first time on the way costs a fault: in the first second of a run that
// made the tasks slower just as the spouts started, and a paced spout
// that its pending window then held back caught up in bursts
// (docs/performance.md, round twenty-two). It is the JVM's
// -XX:+AlwaysPreTouch for a heap that has no fixed size. It returns how
// long it took.
//
// With n the heap floor, the collection that finds the pieces is the
// heap's next, during Prefault or soon after the work starts, and it finds
// the floor's worth in use: the runtime keeps free memory up to about 1.1
// times what was in use at the last collection and returns the rest to
// the system. So Prefault does not collect them itself: a collection
// forced right after, with the heap nearly empty, let the runtime give
// most of the memory back within 50 ms. For the same reason a process
// that stays idle until its periodic collection (every two minutes) gives
// it back then. Where Start advised the heap for huge pages, the memory is
// faulted in 2 MiB at a time.
func Prefault(n uint64) time.Duration {
	if n == 0 {
		return 0
	}
	start := time.Now()
	touch(n)
	return time.Since(start)
}

// touch allocates n bytes of garbage in pieces of 1 MiB, as the heap's
// spans will take the memory, and writes to every page of them.
func touch(n uint64) {
	const piece = 1 << 20
	for left := n; left > 0; left -= min(left, piece) {
		p := make([]byte, min(left, piece))
		for i := 0; i < len(p); i += pageSize {
			p[i] = 1
		}
		prefaultSink = p
	}
	prefaultSink = nil
}

// prefaultSink holds Prefault's last piece, so that its stores are not
// optimised away.
var prefaultSink []byte

// pageSize is the smallest page a fault brings in.
const pageSize = 4096
