// Command tailtrace reads an execution trace of an ackflow process and says
// what the slow trees of a run coincided with: collections, and which
// goroutines were using the processors. The runtime logs every tree that
// took 5 ms or more to complete as a trace event (category
// "ackflow.slow-tree", its latency in microseconds) while an execution trace
// is running; this command groups those trees into spells and compares the
// processors' use inside the spells with the rest of the run.
//
//	go test -run X -bench 'PacedCores/lines=120000' -benchtime 1x -trace /tmp/t.out ./bench/
//	go -C tools/tailtrace run . /tmp/t.out
//
// It is its own module so that the trace parser (golang.org/x/exp/trace)
// is not a dependency of the runtime.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tailtrace TRACE-FILE  (write one with go test -trace, or runtime/trace)")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "tailtrace:", err)
		os.Exit(1)
	}
	defer f.Close()
	rep, err := analyze(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tailtrace: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	rep.print(os.Stdout)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "trace of %.2f s\n", r.span)
	fmt.Fprintf(w, "collections: %d mark phases, %.1f ms in all, the longest %.1f ms\n", len(r.gcs), r.gcTotal()*1000, r.gcLongest()*1000)
	fmt.Fprintf(w, "slow trees (%v or more): %d, of which %d started in a mark phase or up to %v after one\n", slowTree, len(r.slow), r.nearGC, gcShadow)
	fmt.Fprintf(w, "spells (slow trees less than %v apart): %d, %.0f ms in all\n", spellGap, len(r.spells), r.spellTotal()*1000)
	for i, s := range r.largestSpells(5) {
		if i == 0 {
			fmt.Fprintln(w, "  the largest:")
		}
		fmt.Fprintf(w, "    %.3f-%.3f s: %d slow trees, the slowest %.1f ms\n", s.from, s.to, s.trees, s.worst*1000)
	}
	fmt.Fprintln(w, "processors used by each kind of goroutine (cores), inside the spells and in the rest of the run:")
	for _, k := range r.kindOrder() {
		fmt.Fprintf(w, "  %-12s %5.2f %5.2f\n", k, r.coresIn[k], r.coresOut[k])
	}
	fmt.Fprintln(w, "scheduling delay (runnable until running) by kind: p50, p99, max")
	for _, k := range r.kindOrder() {
		d := r.delays[k]
		if len(d) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-12s %9v %9v %9v\n", k, quantile(d, 0.5), quantile(d, 0.99), d[len(d)-1])
	}
}
