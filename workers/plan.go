package workers

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ackflow/ackflow/topology"
)

// ackerComponent is the name of the system component whose tasks run the
// XOR ackers.
const ackerComponent = "__acker"

// taskInfo describes one task of the plan.
type taskInfo struct {
	id          int
	comp        *topology.Component // nil for ackers
	name        string
	index       int
	parallelism int
	stateful    bool // a spout, a keyed bolt, or a bolt implementing topology.Stateful or Transactional
	tx          bool // a bolt implementing topology.Transactional
	own         bool // a bolt implementing topology.Stateful (state only it can split)
}

// route is one subscription of a stream: the tasks a record may go to.
type route struct {
	grouping  topology.GroupingKind
	fieldIdx  []int
	keyGroups int // the topology's, for Fields grouping
	tasks     []int
	byWorker  map[int][]int // tasks per worker slot, for local-or-shuffle
	schema    *topology.Schema
}

// streamOut is everything a component needs to emit on one stream.
type streamOut struct {
	name   string
	key    uint64 // topology.StreamKey(component, stream)
	schema *topology.Schema
	routes []route
	direct bool // every subscriber uses the Direct grouping (the builder forbids mixing)
}

// plan is the static layout of a run: tasks, their workers and routes.
type plan struct {
	topo      *topology.Topology
	tasks     []taskInfo
	compTasks map[string][]int // component -> task IDs in index order; read-only once built
	ackers    []int
	assign    []int // task -> worker slot
	workers   int
	outs      map[string]map[string]*streamOut // component -> stream -> routes
	stateless []int                            // worker slots that hold no stateful task
	holders   []int                            // tasks that keep output logs (stateful bolts with dedup)
	below     map[string][]int                 // spout -> the holders downstream of it (holdersBelow)
}

func newPlan(topo *topology.Topology, cfg Config) (*plan, error) {
	p := &plan{topo: topo, compTasks: map[string][]int{}, workers: cfg.Workers, outs: map[string]map[string]*streamOut{}}
	for name, n := range cfg.Parallelism {
		if topo.Component(name) == nil {
			return nil, fmt.Errorf("workers: --parallelism names %q, which is not a component of %s (it has %s)", name, topo.Name, componentNames(topo))
		}
		if n < 1 || n > topology.MaxParallelism {
			return nil, fmt.Errorf("workers: --parallelism gives %s %d tasks; use 1 to %d", name, n, topology.MaxParallelism)
		}
	}
	for _, c := range topo.Components {
		n := c.Parallelism
		if o, ok := cfg.Parallelism[c.Name]; ok {
			n = o
		}
		if n > topo.KeyGroups && keyed(c) {
			return nil, fmt.Errorf("workers: %s has parallelism %d, more than the topology's %d key groups, which its keyed state or Fields grouping is split into; use at most %d or raise the builder's KeyGroups", c.Name, n, topo.KeyGroups, topo.KeyGroups)
		}
		stateful, tx, own := c.IsSpout() || c.Keyed, false, false
		if !c.IsSpout() {
			// Factories must be pure constructors: this probe instance is
			// never prepared and is dropped.
			probe := topology.Unwrap(c.BoltFn())
			_, own = probe.(topology.Stateful)
			_, tx = probe.(topology.Transactional)
			stateful = stateful || own || tx
		}
		for i := 0; i < n; i++ {
			id := len(p.tasks)
			p.tasks = append(p.tasks, taskInfo{id: id, comp: c, name: c.Name, index: i, parallelism: n, stateful: stateful, tx: tx, own: own})
			p.compTasks[c.Name] = append(p.compTasks[c.Name], id)
		}
	}
	if cfg.Guarantee != AtMostOnce {
		for i := 0; i < cfg.Ackers; i++ {
			id := len(p.tasks)
			p.tasks = append(p.tasks, taskInfo{id: id, name: ackerComponent, index: i, parallelism: cfg.Ackers})
			p.ackers = append(p.ackers, id)
		}
	}
	if cfg.assign != nil {
		// Cluster mode: the generation says where every task runs.
		if len(cfg.assign) != len(p.tasks) {
			return nil, fmt.Errorf("workers: the generation places %d tasks and the plan has %d; the topology differs from the one submitted", len(cfg.assign), len(p.tasks))
		}
		for i, s := range cfg.assign {
			if s < 0 || s >= p.workers {
				return nil, fmt.Errorf("workers: task %d placed on slot %d of %d", i, s, p.workers)
			}
		}
	}
	p.place(cfg.assign)
	if cfg.dedupOn() {
		for _, t := range p.tasks {
			if t.stateful && t.comp != nil && !t.comp.IsSpout() {
				p.holders = append(p.holders, t.id)
			}
		}
		p.below = map[string][]int{}
		for _, c := range topo.Components {
			if c.IsSpout() {
				p.below[c.Name] = p.holdersDownstream(c.Name)
			}
		}
	}
	for _, c := range topo.Components {
		m := map[string]*streamOut{}
		for _, s := range c.StreamNames() {
			so := &streamOut{name: s, key: topology.StreamKey(c.Name, s), schema: c.Streams[s]}
			for _, sub := range topo.Subscribers(c.Name, s) {
				r := route{grouping: sub.Sub.Grouping.Kind, fieldIdx: sub.Sub.FieldIdx, keyGroups: topo.KeyGroups, tasks: p.compTasks[sub.Bolt.Name], schema: c.Streams[s]}
				if r.grouping == topology.GroupLocalOrShuffle {
					r.byWorker = map[int][]int{}
					for _, t := range r.tasks {
						r.byWorker[p.assign[t]] = append(r.byWorker[p.assign[t]], t)
					}
				}
				so.routes = append(so.routes, r)
				so.direct = r.grouping == topology.GroupDirect
			}
			m[s] = so
		}
		p.outs[c.Name] = m
	}
	return p, nil
}

// place spreads tasks over worker slots as given (a generation's
// assignment), or round-robin. (A local run's leader places by
// inCluster.place, which keeps stateful tasks away from crash chaos.)
func (p *plan) place(given []int) {
	p.assign = make([]int, len(p.tasks))
	for i := range p.tasks {
		if given != nil {
			p.assign[i] = given[i]
		} else {
			p.assign[i] = i % p.workers
		}
	}
	for s := 0; s < p.workers; s++ {
		ok := true
		for i, t := range p.tasks {
			if p.assign[i] == s && t.stateful {
				ok = false
			}
		}
		if ok {
			p.stateless = append(p.stateless, s)
		}
	}
}

// logs reports whether task keeps an output log and a dedup filter.
func (p *plan) logs(task int) bool {
	for _, h := range p.holders {
		if h == task {
			return true
		}
	}
	return false
}

// holdersDownstream returns the holders of the components fed, directly
// or through others, by component from.
func (p *plan) holdersDownstream(from string) []int {
	fed := map[string]bool{}
	next := []string{from}
	for len(next) > 0 {
		n := next[0]
		next = next[1:]
		for _, c := range p.topo.Components {
			for _, in := range c.Inputs {
				if in.Source == n && !fed[c.Name] {
					fed[c.Name] = true
					next = append(next, c.Name)
				}
			}
		}
	}
	hs := []int{}
	for _, h := range p.holders {
		if fed[p.tasks[h].name] {
			hs = append(hs, h)
		}
	}
	return hs
}

// holdersBelow returns the tasks that can have logged something for a
// tree of spout task's: the holders downstream of its component, or every
// holder if task is not a spout's.
func (p *plan) holdersBelow(task int) []int {
	if task >= 0 && task < len(p.tasks) {
		if hs, ok := p.below[p.tasks[task].name]; ok { // below has spouts only
			return hs
		}
	}
	return p.holders
}

// ackerFor is the acker task that tracks tree.
func (p *plan) ackerFor(tree uint64) int { return p.ackers[tree%uint64(len(p.ackers))] }

// describe renders the placement for logs: "worker 0: lines[0] count[0]; ...".
func (p *plan) describe() string {
	per := make([][]string, p.workers)
	for i, t := range p.tasks {
		per[p.assign[i]] = append(per[p.assign[i]], fmt.Sprintf("%s[%d]", t.name, t.index))
	}
	parts := make([]string, p.workers)
	for s := range per {
		parts[s] = fmt.Sprintf("worker %d: %s", s, strings.Join(per[s], " "))
	}
	return strings.Join(parts, "; ")
}

// keyed reports whether c's tasks split keys by key group: it keeps keyed
// state or is fed by Fields grouping.
func keyed(c *topology.Component) bool {
	if c.Keyed {
		return true
	}
	for _, in := range c.Inputs {
		if in.Grouping.Kind == topology.GroupFields {
			return true
		}
	}
	return false
}

func componentNames(t *topology.Topology) string {
	var names []string
	for _, c := range t.Components {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
