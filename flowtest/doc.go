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
package flowtest
