// Package topology is ackflow's user API: spouts that read sources, bolts that
// transform records, and a builder that wires them into a DAG with groupings.
//
// A topology is plain Go code compiled into the worker binary. The builder
// validates it (unknown components or streams, cycles, undeclared fields,
// parallelism, duplicate names) and returns a *Topology that the runtime in
// package workers executes:
//
//	b := topology.NewBuilder("wordcount")
//	b.Spout("lines", newLineSpout, 1).Outputs("line")
//	b.Bolt("split", newSplitBolt, 2).Input("lines", topology.Shuffle()).Outputs("word")
//	b.BasicBolt("count", newCountBolt, 2).Input("split", topology.Fields("word"))
//	topo, err := b.Build()
//
// Records are Values (nil, bool, int64, uint64, float64, string, []byte, and
// nested []any and map[string]any: see Values) read through a *Tuple by
// index or field name. Emit normalises other integer and float types and
// refuses anything else with an error that names the field. Emits take
// anchors and message IDs: the runtime uses them to track each source
// record's tree (at-least-once) and ignores them in at-most-once mode.
package topology
