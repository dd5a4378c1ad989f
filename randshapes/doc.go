// Package randshapes holds a randomized property test of whole
// topologies: from a seed it draws a DAG of spouts and bolts (groupings,
// parallelism, fan-out, several streams, unusual values), computes from
// the input alone what every bolt and sink must receive, runs the
// topology in-process with package flowtest under each guarantee with
// injected faults, and compares. A record missing from a sink that the
// runtime did not dead-letter or count as lost is silent loss.
//
// The package has no code of its own; it exists for its test. A default
// `go test ./randshapes/` runs a few seeds; a hunt runs many:
//
//	ACKFLOW_RANDSHAPES_SEEDS=300 go test ./randshapes/ -run TestRandomShapes -timeout 2h
//	ACKFLOW_RANDSHAPES_SEEDS=17-17 go test ./randshapes/ -run 'TestRandomShapes/seed=17/' -v
//
// ACKFLOW_RANDSHAPES_SEEDS takes N (seeds 1..N), a range a-b or a list
// a,b,c; ACKFLOW_RANDSHAPES_CONFIGS limits the run configurations by name
// (alo-chaos, alo-deadletter, eo-chaos, amo-clean, amo-chaos, alo-crash,
// eo-crash, amo-crash, alo-ckpt-crash, alo-deadletter-crash,
// eo-deadletter-crash). Every failure names its seed and configuration,
// prints the command that reproduces it, and logs the shape it drew.
//
// Its first hunt (3,700 runs) found that a full output log held back the
// spouts' replays until the log's entries expired, after which stateful
// bolts ran user code again for inputs they had seen
// (workers.TestFullOutputLogStillReplays pins the fix). Its second found
// that at most once with crashes processed a record twice while a slot
// moved back (workers.TestTwoOwnersOfAMovingSlotRunEachFrameOnce) and
// left records that crashes dropped out of the summary
// (workers.TestAtMostOnceCrashesAccountForEveryRecord). Once its crash
// chaos crashed at-most-once spouts too, it found that a spout whose
// records went to a stream nobody reads never moved its position and,
// started again every few hundred milliseconds, never finished
// (workers.TestNodesAtMostOnceSpoutPositionPassesUnsubscribedRecords).
// The same session's amo-clean hunt found that one run in five of two
// shapes ended with records in flight; TestShapesThatFoundBugs runs
// those shapes again in every default go test. And its all-configuration
// hunt found that under sustained frame loss receivers gave up lost frames
// without asking for them (workers.TestSustainedLossIsResentNotGivenUp).
// Once its crash chaos crashed at-least-once spouts too, its first two
// seeds timed out: without checkpoints a spout task started again read
// its source from the beginning, and one crashed more often than its
// source took to read never reached its end. Such a spout now reads on
// from before its oldest record not yet done
// (workers.TestNodesAtLeastOnceSpoutReadsOnFromItsOldestRecordNotDone).
// Its first hunt with dead letters and crashes together found that the
// trees of dead-lettered roots stayed in the output logs until they
// expired, and a flood of them stopped the spouts reading
// (workers.TestDeadLettersLeaveTheOutputLogs).
package randshapes
