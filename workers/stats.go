package workers

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// componentCounters are shared by a component's tasks (atomics: tasks run on
// several goroutines and the progress reporter reads them live).
type componentCounters struct {
	emitted  atomic.Int64 // records emitted (an emit to several tasks counts once)
	executed atomic.Int64 // inputs processed
	acked    atomic.Int64 // spout: trees completed; bolt: inputs acked
	failed   atomic.Int64 // spout: trees failed; bolt: inputs failed
	replayed atomic.Int64 // spout: roots replayed
	timedOut atomic.Int64 // spout: trees timed out
	panics   atomic.Int64 // bolt: Execute panicked
	latency  histogram    // spout: complete latency

	// Dedup and output logs (stateful bolts).
	dupDropped atomic.Int64 // confirmed duplicates: user code not run
	suspects   atomic.Int64 // Bloom said maybe, nothing confirmed: processed
	reemitted  atomic.Int64 // logged outputs sent again for duplicates
	logPeak    atomic.Int64 // most entries one task's log held
	logBytes   atomic.Int64 // most bytes one task's log held
	expired    atomic.Int64 // log entries dropped by the expiry safety net
	fillBits   atomic.Uint64
	fpBits     atomic.Uint64
}

// maxFloat stores v into a if it is larger (floats as bits).
func maxFloat(a *atomic.Uint64, v float64) {
	for {
		old := a.Load()
		if math.Float64frombits(old) >= v || a.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

// transportCounters count frames and records per worker and for the run.
type transportCounters struct {
	natsMsgsOut, natsBytesOut atomic.Int64
	natsMsgsIn, natsBytesIn   atomic.Int64
	natsRecordsOut            atomic.Int64
	localFrames, localRecords atomic.Int64
	badFrames                 atomic.Int64 // did not decode: counted and dropped
	fencedRecords             atomic.Int64 // from a stale epoch: dropped
	ctrlDropped               atomic.Int64 // control frames dropped on a full inbox
	publishErrors             atomic.Int64
	sentRecords, doneRecords  atomic.Int64 // for the end-of-run accounting
	discardedRecords          atomic.Int64 // dropped by a stopping task
	ackMsgs                   atomic.Int64
	dupFrames                 atomic.Int64 // delivered twice: dropped
	bpSignals                 atomic.Int64 // backpressure signals sent
}

// histogram is a lock-free log-scale histogram of durations: 16 buckets per
// power of two from 1µs to about 2^40µs, so percentiles are within 5%.
type histogram struct {
	buckets [41 * 16]atomic.Int64
	count   atomic.Int64
}

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	b := int(math.Log2(us) * 16)
	if b >= len(histogram{}.buckets) {
		b = len(histogram{}.buckets) - 1
	}
	return b
}

func (h *histogram) observe(d time.Duration) {
	h.buckets[bucketOf(d)].Add(1)
	h.count.Add(1)
}

// quantile returns the q-quantile (0..1), or 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			// Upper edge of bucket i.
			return time.Duration(math.Exp2(float64(i+1)/16) * float64(time.Microsecond))
		}
	}
	return 0
}

// ComponentSummary is one component's figures after a run.
type ComponentSummary struct {
	Name     string
	Tasks    int
	Spout    bool
	Emitted  int64
	Executed int64
	Acked    int64
	Failed   int64
	Replayed int64
	TimedOut int64
	Panics   int64
	// Dedup (stateful bolts, at-least-once): duplicates dropped without
	// running user code, Bloom suspects processed because nothing confirmed
	// them, logged outputs re-emitted, the largest log, and the Bloom
	// filter's fill and estimated false-positive rate at the end.
	DuplicatesDropped, Suspects, ReEmitted int64
	LogPeakEntries, LogPeakBytes           int64
	LogExpired                             int64
	BloomFill, BloomFPRate                 float64
	// Complete latency of the spout's trees (at-least-once only).
	LatencyP50, LatencyP99, LatencyP999 time.Duration
}

// Summary is what a bounded run reports.
type Summary struct {
	Topology  string
	Guarantee Guarantee
	Workers   int
	Placement string
	Duration  time.Duration

	SourceRecords int64 // distinct root records the spouts read (replays excluded)
	Records       int64 // records emitted by all components, replays included
	RecordsPerSec float64
	Components    []ComponentSummary

	NATSMessagesOut, NATSBytesOut int64
	NATSMessagesIn, NATSBytesIn   int64
	NATSRecordsOut                int64 // records that crossed NATS
	LocalRecords                  int64 // records handed over inside a worker
	AckMessages                   int64
	BadFrames                     int64
	FencedRecords                 int64
	CtrlDropped                   int64
	DuplicateFrames               int64 // frames the network delivered twice, dropped
	BackpressureSignals           int64 // times a worker told the spouts to pause
	PublishErrors                 int64
	// Unaccounted are records sent but never processed nor known to be
	// dropped when the run ended: lost in transit (at-most-once) or in a
	// crashed worker (replayed in at-least-once).
	Unaccounted int64
	// LogEntries is what the output logs still held at the end: 0 unless a
	// completion notice was lost, in which case the entry would have
	// expired after ten message timeouts (the run does not wait for that).
	LogEntries int64

	Chaos      ChaosSummary
	Crashes    int
	CrashTimes []time.Duration // when each crash happened, from the start of the run
	Recoveries []time.Duration // per crash: until every tree pending at the crash completed
}

// ChaosSummary counts what fault injection did.
type ChaosSummary struct {
	FramesDropped, RecordsDropped       int64
	FramesDuplicated, RecordsDuplicated int64
	FramesDelayed, FramesReordered      int64
}

// Component returns the named component's figures, or the zero value.
func (s *Summary) Component(name string) ComponentSummary {
	for _, c := range s.Components {
		if c.Name == name {
			return c
		}
	}
	return ComponentSummary{}
}

// Progress is a live view of a run.
type Progress struct {
	Elapsed       time.Duration
	Records       int64   // records emitted so far
	RecordsPerSec float64 // over the last interval
	Pending       int64   // trees in flight (at-least-once)
	InFlight      int64   // records sent but not yet processed
}

// recoveryLog collects recovery times reported by spout tasks.
type recoveryLog struct {
	mu    sync.Mutex
	byID  map[int64]time.Duration // crash ID -> longest recovery seen
	order []int64
}

func (r *recoveryLog) report(crash int64, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[int64]time.Duration{}
	}
	old, ok := r.byID[crash]
	if !ok {
		r.order = append(r.order, crash)
	}
	if !ok || d > old {
		r.byID[crash] = d
	}
}

func (r *recoveryLog) list() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.order))
	for _, id := range r.order {
		out = append(out, r.byID[id])
	}
	return out
}
