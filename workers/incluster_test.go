package workers_test

import (
	"testing"

	"github.com/ackflow/ackflow/workers"
)

// TestLocalTestsAsAnInProcessCluster runs local-mode tests of several
// shapes, guarantees and faults again with every local run an in-process
// cluster (Config.InProcessCluster): worker nodes in this process elect a
// leader, which places the tasks, moves a crashed node's stateless slots
// or rolls every task back to the latest checkpoint, and ends the run.
// Each test's own oracle is the proof: the All grouping, diamond, shuffle,
// fan-out and partial-emit shapes under frame chaos and node crashes;
// exactly-once with crashes of any node; at-least-once with checkpoints;
// resume, and a corrupt checkpoint refused on resume; every value type;
// poison records to the dead letters; garbage frames; the status page's
// view and the metrics against the summary; no per-record logs.
func TestLocalTestsAsAnInProcessCluster(t *testing.T) {
	reset := workers.RunLocalAsInProcessCluster()
	defer reset()
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"AllGrouping", TestAllGroupingIntoStatefulTallyIsExact},
		{"Diamond", TestDiamondIntoStatefulJoinIsExact},
		{"BehindShuffle", TestStatefulBoltBehindShuffleRunsOncePerInput},
		{"FanOut", TestFiftyWayFanOutIsExact},
		{"PartialEmit", TestStatefulBoltFailingAfterPartialEmitLosesNothing},
		{"ExactlyOnceCrashes", TestExactlyOnceStateSurvivesCrashesOfAnyWorker},
		{"AtLeastOnceCheckpoints", TestAtLeastOnceWithCheckpointsLosesNothing},
		{"Resume", TestResumeFromCheckpointDirectory},
		{"CorruptCheckpoint", TestCorruptCheckpointFallsBackToThePreviousOne},
		{"ValueTypes", TestValueTypes},
		{"Poison", TestPoisonRecordGoesToDeadLetters},
		{"PanickingBolt", TestPanickingBoltFailsInputAndReplays},
		{"GarbageFrames", TestGarbageFramesAreCountedAndDropped},
		{"View", TestLocalViewShowsTheRun},
		{"Metrics", TestMetricsMatchTheSummaryUnderChaos},
		{"Logs", TestNoPerRecordLogsAtInfo},
	} {
		t.Run(c.name, c.test)
	}
}
