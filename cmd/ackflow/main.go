// Command ackflow runs ackflow topologies in local mode and in cluster
// mode, a development NATS server and the benchmark suite. It is package
// cli with the bundled topologies; see that package to build a worker
// binary with your own.
package main

import "github.com/ackflow/ackflow/cli"

func main() { cli.Main(cli.Bundled()) }
