package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Type is a family's Prometheus type.
type Type int

const (
	Counter Type = iota + 1
	Gauge
	Histogram
)

func (t Type) String() string {
	switch t {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	case Histogram:
		return "histogram"
	}
	return "unknown"
}

// Family is one metric family: every sample of it has the same labels.
type Family struct {
	Name   string
	Help   string
	Type   Type
	Labels []string
	// Buckets are a histogram's upper bounds, in seconds.
	Buckets []float64

	desc   *prometheus.Desc
	bounds []int64 // Buckets in nanoseconds, for Observe
}

// The labels. Task is the task's index within its component ("0", "1",
// ...), not its ID in the plan, so that it stays the same when other
// components are rebalanced. No label carries a record ID or a key: a
// series exists per task, whatever the data.
var (
	topologyLabels = []string{"topology"}
	taskLabels     = []string{"topology", "component", "task"}
)

// families in the order Names lists them (docs/metrics.md follows it).
var families []*Family

func family(name string, t Type, labels []string, help string, buckets ...time.Duration) *Family {
	f := &Family{Name: name, Help: help, Type: t, Labels: labels}
	for _, b := range buckets {
		f.Buckets = append(f.Buckets, b.Seconds())
		f.bounds = append(f.bounds, int64(b))
	}
	f.desc = prometheus.NewDesc(name, help, labels, nil)
	families = append(families, f)
	return f
}

// Names returns the name of every family the runtime exports, so that a
// dashboard or an alert can be checked against them.
func Names() []string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = f.Name
	}
	return names
}

// Families returns every family the runtime exports.
func Families() []*Family { return append([]*Family(nil), families...) }

// latencyBuckets suit complete latency, from a fraction of a millisecond
// on an idle machine to the message timeout.
var latencyBuckets = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second, 60 * time.Second,
}

// executeBuckets start lower: a bolt spends a microsecond or two per input
// in word count's split.
var executeBuckets = []time.Duration{
	time.Microsecond, 2500 * time.Nanosecond, 5 * time.Microsecond,
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// Per task.
var (
	Emitted           = family("ackflow_emitted_total", Counter, taskLabels, "Records emitted. Spouts count new source records (their replays are in ackflow_replayed_total); bolts count every emit. An emit to several tasks counts once.")
	Transferred       = family("ackflow_transferred_total", Counter, taskLabels, "Records the task published to NATS; records handed to a task of the same worker stay in memory and are not counted.")
	Executed          = family("ackflow_executed_total", Counter, taskLabels, "Bolts: inputs whose user code ran.")
	Acked             = family("ackflow_acked_total", Counter, taskLabels, "Spouts: trees completed (source records fully processed). Bolts: inputs acked.")
	Failed            = family("ackflow_failed_total", Counter, taskLabels, "Spouts: tree attempts that failed (a bolt failed an input, a timeout, a worker's death); each is replayed or dead-lettered. Bolts: inputs failed.")
	Replayed          = family("ackflow_replayed_total", Counter, taskLabels, "Spouts: source records emitted again after a failed attempt.")
	TimedOut          = family("ackflow_timed_out_total", Counter, taskLabels, "Spouts: trees not completed within the message timeout (also counted in ackflow_failed_total).")
	DeadLettered      = family("ackflow_dead_lettered_total", Counter, taskLabels, "Spouts: source records given up on after too many failed attempts, or refused at emit, and sent to the dead letters.")
	DuplicatesDropped = family("ackflow_duplicates_dropped_total", Counter, taskLabels, "Stateful bolts: confirmed duplicates of completed inputs; user code did not run again.")
	DedupSuspects     = family("ackflow_dedup_suspects_total", Counter, taskLabels, "Stateful bolts: inputs the Bloom filter said it may have seen that no exact check confirmed; they were processed (a Bloom false positive never drops a record).")
	DedupReEmitted    = family("ackflow_dedup_reemitted_total", Counter, taskLabels, "Stateful bolts: logged outputs sent again for confirmed duplicates, so that tasks downstream that missed them get them.")
	Panics            = family("ackflow_panics_total", Counter, taskLabels, "User code that panicked (Execute, or a spout's Ack, Fail or DeadLettered); the input was failed and the task went on.")
	EmitErrors        = family("ackflow_emit_errors_total", Counter, taskLabels, "Emits the runtime refused (an undeclared stream, values of the wrong number or type, a record too large); the input was failed or dead-lettered.")
	CompleteLatency   = family("ackflow_complete_latency_seconds", Histogram, taskLabels, "Spouts: from emitting a source record to the completion of its tree (at-least-once and exactly-once).", latencyBuckets...)
	ExecuteLatency    = family("ackflow_execute_latency_seconds", Histogram, taskLabels, "Bolts: processing time per input: dedup, user code and emits, including waits for a full inbox downstream. Measured per frame of inputs, whose time is shared evenly among its inputs, so that the clock is read twice per frame, not per record.", executeBuckets...)
	Capacity          = family("ackflow_capacity_ratio", Gauge, taskLabels, "Bolts: fraction of the last second the task spent processing inputs; near 1 the task is the bottleneck (add parallelism). Over longer windows: rate(ackflow_execute_latency_seconds_sum[5m]).")
	InboundQueue      = family("ackflow_inbound_queue_frames", Gauge, taskLabels, "Frames waiting in the task's inboxes (records, acker messages, notices).")
	PendingTrees      = family("ackflow_pending_trees", Gauge, taskLabels, "Spouts: trees in flight or waiting for their replay; bounded by the max spout pending.")
	PendingWindow     = family("ackflow_pending_window", Gauge, taskLabels, "Spouts: trees the task may have in flight now, between an eighth of the max spout pending and all of it: doubled while the window holds a spout with records to emit back (after the first few periods, only once it has done so more than half the time over about a second), halved while it does not.")
	OutputLogEntries  = family("ackflow_output_log_entries", Gauge, taskLabels, "Stateful bolts: inputs whose outputs the output log keeps until their trees complete.")
	OutputLogBytes    = family("ackflow_output_log_bytes", Gauge, taskLabels, "Stateful bolts: estimated memory the output log holds.")
	BloomFill         = family("ackflow_bloom_fill_ratio", Gauge, taskLabels, "Stateful bolts: fraction of bits set in the newest Bloom generation of the dedup filter.")
	BloomFPRate       = family("ackflow_bloom_false_positive_ratio", Gauge, taskLabels, "Stateful bolts: estimated probability that the dedup filter says 'maybe seen' of a new ID (then the exact check decides).")
)

// Per topology: checkpoints, from the process that takes them (local mode,
// or the topology leader in cluster mode).
var (
	CheckpointsCompleted = family("ackflow_checkpoints_completed_total", Counter, topologyLabels, "Checkpoints completed (their manifest written).")
	CheckpointsFailed    = family("ackflow_checkpoints_failed_total", Counter, topologyLabels, "Checkpoints abandoned (the spouts did not drain in time, a task failed, a rollback interrupted it); the next interval tries again.")
	CheckpointPauseTotal = family("ackflow_checkpoint_pause_seconds_total", Counter, topologyLabels, "Time the spouts stood still for completed checkpoints; its rate is the fraction of time lost to them.")
	CheckpointDuration   = family("ackflow_checkpoint_last_duration_seconds", Gauge, topologyLabels, "The latest complete checkpoint: from pausing the spouts to writing the manifest.")
	CheckpointSize       = family("ackflow_checkpoint_last_size_bytes", Gauge, topologyLabels, "The latest complete checkpoint: bytes of all its task snapshots.")
	CheckpointPause      = family("ackflow_checkpoint_last_pause_seconds", Gauge, topologyLabels, "The latest complete checkpoint: how long the spouts stood still.")
	CheckpointAge        = family("ackflow_checkpoint_age_seconds", Gauge, topologyLabels, "Time since the latest complete checkpoint finished: how much a failure would replay. It grows when checkpoints fail.")
	CheckpointEpoch      = family("ackflow_checkpoint_epoch", Gauge, topologyLabels, "Epoch of the latest complete checkpoint.")
)

// Per topology: the workers of this process.
var (
	FencedFrames    = family("ackflow_fenced_frames_total", Counter, topologyLabels, "Frames and checkpoint commands of another generation dropped (cluster mode: a worker paused past its lease, or late frames of a generation that ended).")
	FencedRecords   = family("ackflow_fenced_records_total", Counter, topologyLabels, "Records dropped because they came from a stale epoch (a worker replaced after a crash, or another generation), or, at most once, were addressed to another owner of a moving slot.")
	DiscardedRecs   = family("ackflow_discarded_records_total", Counter, topologyLabels, "Records dropped by tasks that stopped or crashed: queued for a task that stopped, or emitted into a batch it never sent (a frame that could not be published, a task stopped before its flush). At least once and exactly once replay their trees; at most once loses them.")
	BadFrames       = family("ackflow_bad_frames_total", Counter, topologyLabels, "Frames that did not decode or did not fit their destination, dropped.")
	DuplicateFrames = family("ackflow_duplicate_frames_total", Counter, topologyLabels, "Frames the network delivered twice, dropped.")
	FrameNACKs      = family("ackflow_frame_nacks_total", Counter, topologyLabels, "NACKs sent for frames noticed missing (a gap in sequence numbers, or a sender's high-water mark beyond what arrived); each asks the sender to resend.")
	FramesResent    = family("ackflow_frames_resent_total", Counter, topologyLabels, "Frames sent again in answer to a NACK.")
	FramesLost      = family("ackflow_frames_lost_total", Counter, topologyLabels, "Frames noticed missing and given up on after repeated NACKs; their trees time out and replay.")
	PublishErrors   = family("ackflow_publish_errors_total", Counter, topologyLabels, "Frames that could not be sent; their trees were failed and replayed.")
	Backpressure    = family("ackflow_backpressure_signals_total", Counter, topologyLabels, "Times a worker told the spouts to pause because an inbox or its NATS backlog passed its high-water mark.")
	NATSMsgsOut     = family("ackflow_nats_sent_messages_total", Counter, topologyLabels, "NATS messages published by the tasks.")
	NATSBytesOut    = family("ackflow_nats_sent_bytes_total", Counter, topologyLabels, "Bytes of the NATS messages published by the tasks.")
	NATSMsgsIn      = family("ackflow_nats_received_messages_total", Counter, topologyLabels, "NATS messages received by the tasks.")
	NATSBytesIn     = family("ackflow_nats_received_bytes_total", Counter, topologyLabels, "Bytes of the NATS messages received by the tasks.")
	NATSReconnects  = family("ackflow_nats_reconnects_total", Counter, topologyLabels, "Reconnections of the workers' NATS connections (a NATS server restarted or was unreachable).")
	SlowConsumers   = family("ackflow_nats_slow_consumers_total", Counter, topologyLabels, "Slow-consumer errors the NATS client reported on the workers' connections (messages dropped for them are recovered as lost frames).")
	InvalidEntries  = family("ackflow_invalid_kv_entries_total", Counter, topologyLabels, "Cluster mode, on the topology leader: entries no ackflow program writes (garbage, another topology's, a stale number) found where the topology's generation belongs; the leader wrote a new generation over each.")
	SlotMoves       = family("ackflow_slot_moves_total", Counter, topologyLabels, "Cluster mode, on the topology leader: dead workers whose slots, all of whose tasks were stateless, moved to a live worker within the running generation (at-least-once) instead of rolling the topology back.")
	Recovery        = family("ackflow_recovery_seconds", Gauge, topologyLabels, "The latest failover, shown by the topology's leader (in local mode, the run's): from noticing the loss of a worker until the new generation's tasks began, or, when the dead worker's stateless slot moved, until its new owner's tasks were ready.")
)
