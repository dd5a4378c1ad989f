// Package flowtest runs a topology in-process, with fault injection, and
// hands back what reached its sinks, so that users can test their own
// topologies the way ackflow tests word count (in the spirit of Flink's
// MiniCluster and goka's tester):
//
//	sink := flowtest.NewSink()
//	b.Bolt("out", sink.Bolt, 1).Input("count", topology.Global())
//	res, err := flowtest.Run(ctx, topo, flowtest.Options{
//		Guarantee: workers.AtLeastOnce,
//		Chaos:     chaos.Config{Drop: 0.05, Dup: 0.01, Seed: 7},
//	})
//	got := sink.Values()
//
// Runs use an embedded NATS server and several logical workers, so records
// cross NATS exactly as in `ackflow run`.
//
// sink.StatefulBolt makes the sink a stateful bolt, with the runtime's
// dedup in front of it: at-least-once, it then receives every record once.
// sink.FailFirst(p) makes it fail the first delivery of a fraction of the
// records, a source of replays that loss recovery does not hide, and chaos
// Fail does the same in every bolt. Records the runtime gives up on are in
// the summary's DeadLetters.
package flowtest
