package workers

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ackflow/ackflow/deadletter"
	"github.com/ackflow/ackflow/metrics"
)

// taskCounters are one task's figures. Only the task's goroutine writes
// most of them, but they are atomics because the progress reporter, the
// summary and Prometheus scrapes (metrics.go) read them while it runs, and
// because a restarted task's executor may start while the crashed one
// winds down. They are per task rather than per component so that tasks
// of a component do not contend for one cache line, and so that metrics
// carry a task label; the summary adds them up per component.
type taskCounters struct {
	emitted  atomic.Int64 // records emitted (an emit to several tasks counts once)
	executed atomic.Int64 // inputs processed
	acked    atomic.Int64 // spout: trees completed; bolt: inputs acked
	failed   atomic.Int64 // spout: trees failed; bolt: inputs failed
	replayed atomic.Int64 // spout: roots replayed
	timedOut atomic.Int64 // spout: trees timed out
	// Spout: its pending window now and the largest it reached
	// (pendingWindow).
	window, windowPeak atomic.Int64
	panics             atomic.Int64 // bolt: Execute panicked
	latency            *histogram   // spout: complete latency (nil for bolts)
	// Spout: when its first root left and its last tree completed, in
	// UnixNano (0: not yet), for Summary.FirstRecordAfter and
	// Summary.EndedAfterLastTree.
	firstRoot, lastTree atomic.Int64

	// transferred are data records published to NATS (metrics only: the
	// run's total is transportCounters.natsRecordsOut).
	transferred atomic.Int64

	// Dedup and output logs (stateful bolts).
	dupDropped atomic.Int64 // confirmed duplicates: user code not run
	suspects   atomic.Int64 // Bloom said maybe, nothing confirmed: processed
	reemitted  atomic.Int64 // logged outputs sent again for duplicates
	logPeak    atomic.Int64 // most entries the task's log held
	logBytes   atomic.Int64 // most bytes the task's log held
	logSize    atomic.Int64 // bytes the task's log holds now
	expired    atomic.Int64 // log entries dropped by the expiry safety net
	fillBits   atomic.Uint64
	fpBits     atomic.Uint64
	reexecuted atomic.Int64 // inputs failed earlier and executed again (not suspects)
	parked     atomic.Int64 // replays that waited for their original, still held, to be acked or failed

	deadLettered atomic.Int64 // spout: roots given up on and sent to the dead letters
	emitErrors   atomic.Int64 // emits refused (bad stream, values, size, direct misuse)

	// With a metrics registry only (nil or zero otherwise): Prometheus
	// histograms of complete latency (spouts) and execute latency
	// (bolts), the time a bolt spent processing inputs, its capacity over
	// the last window, and its dedup filter's current fill and estimated
	// false-positive rate (fillBits and fpBits keep the highest, for the
	// summary).
	complete, execute  *metrics.LatencyHistogram
	busy               atomic.Int64  // nanoseconds
	capacity           atomic.Uint64 // float64 bits
	bloomFill, bloomFP atomic.Uint64 // float64 bits
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
	fencedFrames              atomic.Int64 // cluster mode: from another generation: dropped
	publishErrors             atomic.Int64 // frames that could not be encoded or published
	sentRecords, doneRecords  atomic.Int64 // for the end-of-run accounting
	discardedRecords          atomic.Int64 // sent, then dropped by a stopping task
	unsentRecords             atomic.Int64 // never sent: unpublishable, or left in a stopping task's outbox
	ackMsgs                   atomic.Int64
	ackRides                  atomic.Int64 // ACKs that rode on a child record (boltExec.Ack)
	dupFrames                 atomic.Int64 // delivered twice: dropped
	bpSignals                 atomic.Int64 // backpressure signals sent
	nacks                     atomic.Int64 // NACKs sent for missing frames
	resent                    atomic.Int64 // frames sent again for a NACK
	resendMisses              atomic.Int64 // NACKed frames no longer kept
	lostFrames                atomic.Int64 // missing frames given up on (their trees time out)
	deadLetterErrors          atomic.Int64 // dead letters that could not be written (retried)
	reconnects                atomic.Int64 // of the workers' NATS connections
	slowConsumers             atomic.Int64 // slow-consumer errors the NATS client reported
}

// discarded are the records stopping and crashing tasks dropped: sent to
// a task that stopped, or never sent (Summary.Discarded, the
// discarded-records metric).
func (tc *transportCounters) discarded() int64 {
	return tc.discardedRecords.Load() + tc.unsentRecords.Load()
}

// histogram is a lock-free log-scale histogram of durations: 16 buckets per
// power of two from 1µs to about 2^40µs, so percentiles are within 5%.
type histogram struct {
	buckets [41 * 16]atomic.Int64
	count   atomic.Int64
}

// bucketOf returns floor(16 log2(d in µs)), from the float's exponent and
// a binary search of its mantissa among the 16 bucket edges of an octave:
// one bucket is counted per tree, and math.Log2 took 0.7% of the CPU of the
// benchmark's word count.
func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	frac, exp := math.Frexp(us) // us = frac * 2^exp, frac in [0.5, 1)
	m, k := 2*frac, 0
	for step := 8; step > 0; step >>= 1 {
		if m >= octaveEdges[k+step] {
			k += step
		}
	}
	return min(16*(exp-1)+k, len(histogram{}.buckets)-1)
}

// octaveEdges[i] is 2^(i/16), the lower edge of the i-th bucket of an
// octave relative to the octave's start.
var octaveEdges = func() (e [17]float64) {
	for i := range e {
		e[i] = math.Exp2(float64(i) / 16)
	}
	return e
}()

func (h *histogram) observe(d time.Duration) {
	h.buckets[bucketOf(d)].Add(1)
	h.count.Add(1)
}

// add adds o's counts to h (o is read while its task observes).
func (h *histogram) add(o *histogram) {
	for i := range o.buckets {
		h.buckets[i].Add(o.buckets[i].Load())
	}
	h.count.Add(o.count.Load())
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
	// WindowPeak (spouts, at-least-once and exactly-once): the most trees
	// a task's pending window let be in flight at some point of the run,
	// between an eighth of Config.MaxSpoutPending and all of it.
	WindowPeak int64
	// Dedup (stateful bolts, at-least-once): duplicates dropped without
	// running user code, Bloom suspects processed because nothing confirmed
	// them, logged outputs re-emitted, the largest log, the log entries
	// (tombstones included) that expired rather than left with a completed
	// or abandoned tree, and the Bloom filter's fill and estimated
	// false-positive rate at the end.
	DuplicatesDropped, Suspects, ReEmitted int64
	LogPeakEntries, LogPeakBytes           int64
	LogExpired                             int64
	BloomFill, BloomFPRate                 float64
	// ReExecuted counts inputs that failed earlier and ran again (only a
	// completed input is a duplicate).
	ReExecuted int64
	// Parked counts replays that arrived while the bolt still held the
	// original and waited for its ack or fail.
	Parked int64
	// DeadLettered (spouts): roots given up on after MaxAttempts failed
	// attempts, or refused at emit, and sent to the dead letters.
	DeadLettered int64
	// EmitErrors: emits the runtime refused (see topology.Collector).
	EmitErrors int64
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

	// SourceRecords counts the root records the spouts read from their
	// sources, replays excluded. Exactly-once, the records a spout reads
	// again after a rollback to a checkpoint count again; without
	// checkpoints, so do those a spout task started again reads again from
	// the position the task it replaces wrote: at most once, what that one
	// had read but not sent; at least once, its records not yet fully
	// processed, and those done since it wrote.
	SourceRecords int64
	Records       int64 // records emitted by all components, replays included
	RecordsPerSec float64
	Components    []ComponentSummary

	NATSMessagesOut, NATSBytesOut int64
	NATSMessagesIn, NATSBytesIn   int64
	NATSRecordsOut                int64 // records that crossed NATS
	LocalRecords                  int64 // records handed over inside a worker
	AckMessages                   int64
	// AckRides counts the ACKs of bolt inputs that rode on one of the
	// input's child records, still unsent, instead of going to an acker:
	// the acker gets their value when that child is acked.
	AckRides      int64
	BadFrames     int64
	FencedRecords int64
	// FencedFrames counts frames of another generation dropped in cluster
	// mode (a worker paused past its lease, or a stale frame).
	FencedFrames        int64
	DuplicateFrames     int64 // frames the network delivered twice, dropped
	BackpressureSignals int64 // times a worker told the spouts to pause
	// SlowConsumers counts slow-consumer errors the workers' NATS clients
	// reported, and Reconnects their reconnections (a server closes a
	// slow consumer's connection); frames lost that way are NACKed and
	// sent again, or their trees replay.
	SlowConsumers, Reconnects int64
	PublishErrors             int64 // frames that could not be sent; their trees were failed
	// Discarded are records the runtime dropped unprocessed because the
	// task holding them stopped or crashed (queued for it, or emitted by
	// it and not yet sent), or because their frame could not be sent. In
	// at-least-once and exactly-once their trees replay; in at-most-once
	// they are lost, and counted here.
	Discarded int64
	// Loss recovery (at-least-once): NACKs sent for missing frames, frames
	// sent again, NACKed frames no longer kept, and missing frames given up
	// on (their trees timed out).
	NACKs, Resent, ResendMisses, LostFrames int64
	// DeadLettered is the number of roots sent to the dead letters; when
	// Config.DeadLetters is nil, DeadLetters holds them.
	DeadLettered     int64
	DeadLetters      []deadletter.Letter
	DeadLetterStream string // the JetStream stream holding them, with Config.DeadLetterStream
	DeadLetterErrors int64  // writes to the dead letters that failed and were retried
	// Unaccounted are records sent but never processed nor known to be
	// dropped when the run ended: lost in transit (at-most-once) or in a
	// crashed worker (replayed in at-least-once).
	Unaccounted int64
	// LogEntries is what the output logs still held at the end: 0 unless a
	// completion notice was lost, in which case the entry would have
	// expired after ten message timeouts (the run does not wait for that).
	LogEntries int64

	// Checkpoints: what they did (zero without checkpoints).
	Checkpoints CheckpointSummary

	Chaos      ChaosSummary
	Crashes    int
	CrashTimes []time.Duration // when each crash happened, from the start of the run
	// Recoveries are per crash, from the crash until its failovers were
	// over: every tree in flight when a slot of the crashed node moved
	// away, or back once the node returned, completed; after a rollback,
	// the lost tasks ran again from the latest checkpoint. A crash whose
	// failover was not over when the run ended has none.
	Recoveries []time.Duration

	// FirstRecordAfter is how long after the run started its first root
	// record left a spout, and EndedAfterLastTree how long after its last
	// tree completed the run ended (0 when no tree completed: at-most-once
	// tracks none): a run's start-up and the noticing of its end.
	FirstRecordAfter, EndedAfterLastTree time.Duration
	firstRoot, lastTree                  int64 // UnixNano, 0: none
}

// ChaosSummary counts what fault injection did.
type ChaosSummary struct {
	FramesDropped, RecordsDropped       int64
	FramesDuplicated, RecordsDuplicated int64
	FramesDelayed, FramesReordered      int64
	InputsFailed                        int64 // inputs bolts failed before user code (chaos fail=)
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
	Replayed      int64   // source records replayed so far
	DeadLettered  int64   // source records given up on so far
}

// recoveryLog collects what spout tasks report of each death notice: when
// the death was noticed, and when the last tree it failed completed.
type recoveryLog struct {
	mu   sync.Mutex
	byID map[int64]span // crash ID -> from the notice's time to the latest completion
}

// span is a failover: from the death (or the move) that caused it, at,
// until what it disturbed runs again, done.
type span struct{ at, done time.Time }

func (r *recoveryLog) report(crash int64, at, done time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[int64]span{}
	}
	if old, ok := r.byID[crash]; !ok || done.After(old.done) {
		r.byID[crash] = span{at: at, done: done}
	}
}

// byCrash returns the failovers by crash ID.
func (r *recoveryLog) byCrash() map[int64]span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.byID)
}
