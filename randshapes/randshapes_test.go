package randshapes_test

// A randomized property test of topology shapes. From a seed, genShape
// draws spouts, bolts and sinks; expect computes, from the input alone,
// the multiset of records every bolt and sink must receive; runOne runs
// the topology under one guarantee with faults and compare checks what
// arrived against it. See doc.go for how to run a hunt.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/chaos"
	"github.com/ackflow/ackflow/dedup"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/internal/testbuf"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/upstreambackup"
	"github.com/ackflow/ackflow/workers"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// ---------------------------------------------------------------------
// Shapes.

type kind int

const (
	kindSpout kind = iota
	kindBolt
	kindStatefulBolt
	kindBasic
	kindStatefulBasic
	kindSink
	kindStatefulSink
)

func (k kind) String() string {
	return [...]string{"spout", "bolt", "stateful-bolt", "basic", "stateful-basic", "sink", "stateful-sink"}[k]
}

// stateful reports whether the runtime treats the component as stateful,
// so that dedup stands in front of its user code.
func (k kind) stateful() bool {
	return k == kindStatefulBolt || k == kindStatefulBasic || k == kindStatefulSink
}

func (k kind) sink() bool { return k == kindSink || k == kindStatefulSink }

type stream struct {
	name   string
	fields []string
}

type grouping struct {
	kind   topology.GroupingKind
	fields []string
}

func (g grouping) build() topology.Grouping {
	if g.kind == topology.GroupFields {
		return topology.Fields(g.fields...)
	}
	return topology.Grouping{Kind: g.kind}
}

func (g grouping) String() string { return g.build().String() }

type sub struct {
	src, stream string
	g           grouping
}

type comp struct {
	name      string
	kind      kind
	par       int
	n         int64 // spouts: records emitted
	streams   []stream
	subs      []sub
	failFirst float64 // bolts: fail the first delivery of this fraction after a partial emit
	reuse     bool    // ReuseInputs
	zeroCopy  bool    // ZeroCopyInputs
	// explicitIDs: the bolt names its outputs' IDs (EmitWithID), derived
	// from the input's ID, the output's key and the task.
	explicitIDs bool
}

type shape struct {
	seed                                 uint64
	workers, batch, pending, ackers, que int
	keyGroups                            int // 0: the default
	// dedup and log size stateful tasks' filters and output logs. The
	// small filters still cover every input of a run (maxDeliveries), as
	// dedup's promise needs; the high false-positive rate makes Bloom
	// suspects common, none of which may drop a record. The small log
	// fills, and a full log must stop the spouts reading but not
	// replaying (workers' TestFullOutputLogStillReplays, found here).
	dedup dedup.Config
	log   upstreambackup.Config
	comps []*comp // topological: spouts, bolts, sinks
}

func (sh *shape) comp(name string) *comp {
	for _, c := range sh.comps {
		if c.name == name {
			return c
		}
	}
	panic("randshapes: no component " + name)
}

func (sh *shape) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: workers=%d batch=%d max-spout-pending=%d ackers=%d queue=%d key-groups=%d dedup=%+v log=%+v\n", sh.seed, sh.workers, sh.batch, sh.pending, sh.ackers, sh.que, sh.keyGroups, sh.dedup, sh.log)
	for _, c := range sh.comps {
		fmt.Fprintf(&b, "  %-14s %s x%d", c.kind, c.name, c.par)
		if c.kind == kindSpout {
			fmt.Fprintf(&b, " n=%d", c.n)
		}
		if c.failFirst > 0 {
			fmt.Fprintf(&b, " fail-first=%v", c.failFirst)
		}
		if c.reuse {
			b.WriteString(" reuse-inputs")
		}
		if c.zeroCopy {
			b.WriteString(" zero-copy")
		}
		if c.explicitIDs {
			b.WriteString(" explicit-ids")
		}
		if len(c.subs) > 0 {
			b.WriteString(" <-")
			for i, s := range c.subs {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %s/%s %s", s.src, s.stream, s.g)
			}
		}
		if len(c.streams) > 0 {
			b.WriteString(" ->")
			for _, s := range c.streams {
				fmt.Fprintf(&b, " %s(%s)", s.name, strings.Join(s.fields, ","))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// streamNames are the output streams shapes draw from: the default, a
// plain one and one with non-ASCII letters.
var streamNames = []string{topology.DefaultStream, "alt", "ström-✓"}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func drawStreams(r *rand.Rand) []stream {
	names := slices.Clone(streamNames)
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	out := make([]stream, 1+r.IntN(2))
	for i := range out {
		out[i] = stream{name: names[i], fields: []string{"k", "v"}}
		if r.IntN(2) == 0 {
			out[i].fields = append(out[i].fields, "w")
		}
	}
	return out
}

func drawGrouping(r *rand.Rand, s stream) grouping {
	switch r.IntN(5) {
	case 0:
		return grouping{kind: topology.GroupShuffle}
	case 1:
		fields := slices.Clone(s.fields)
		r.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		return grouping{kind: topology.GroupFields, fields: fields[:1+r.IntN(len(fields))]}
	case 2:
		return grouping{kind: topology.GroupAll}
	case 3:
		return grouping{kind: topology.GroupGlobal}
	}
	return grouping{kind: topology.GroupLocalOrShuffle}
}

// genShape draws a shape from seed: 1-2 spouts, 2-5 bolts each fed by 1-2
// earlier components' streams, and 1-2 sinks fed by streams nobody reads
// yet (or any, when every stream is read). The spouts' record counts are
// then cut until the oracle stays within a budget of deliveries and bytes.
func genShape(seed uint64) *shape {
	r := rand.New(rand.NewPCG(seed, 0x5eed5))
	sh := &shape{
		seed:    seed,
		workers: 1 + r.IntN(3),
		batch:   pick(r, 1, 7, 64, 512),
		pending: pick(r, 8, 64, 4096),
		ackers:  1 + r.IntN(3),
		que:     pick(r, 4, 16, 64),
	}
	type out struct {
		c *comp
		s stream
	}
	var outs []out
	read := map[[2]string]bool{}
	for i := range 1 + r.IntN(2) {
		c := &comp{name: fmt.Sprintf("s%d", i), kind: kindSpout, par: 1 + r.IntN(4), n: 20 + r.Int64N(280), streams: drawStreams(r)}
		sh.comps = append(sh.comps, c)
		for _, s := range c.streams {
			outs = append(outs, out{c, s})
		}
	}
	subscribe := func(c *comp, o out) {
		for _, s := range c.subs {
			if s.src == o.c.name && s.stream == o.s.name {
				return // a bolt subscribes to a stream once
			}
		}
		c.subs = append(c.subs, sub{src: o.c.name, stream: o.s.name, g: drawGrouping(r, o.s)})
		read[[2]string{o.c.name, o.s.name}] = true
	}
	for i := range 2 + r.IntN(4) {
		c := &comp{
			name:      fmt.Sprintf("b%d", i),
			kind:      pick(r, kindBolt, kindStatefulBolt, kindBasic, kindStatefulBasic),
			par:       1 + r.IntN(4),
			streams:   drawStreams(r),
			failFirst: pick(r, 0, 0, 0.05, 0.2),
			reuse:     r.IntN(4) == 0,
			zeroCopy:  r.IntN(4) == 0,
		}
		// Layers: the first input is often the latest stream, so that
		// chains get deep; the second is any earlier one.
		if r.IntN(5) < 3 {
			subscribe(c, outs[len(outs)-1])
		} else {
			subscribe(c, outs[r.IntN(len(outs))])
		}
		if r.IntN(2) == 0 {
			subscribe(c, outs[r.IntN(len(outs))])
		}
		sh.comps = append(sh.comps, c)
		for _, s := range c.streams {
			outs = append(outs, out{c, s})
		}
	}
	var unread []out
	for _, o := range outs {
		if o.c.kind != kindSpout && !read[[2]string{o.c.name, o.s.name}] {
			unread = append(unread, o)
		}
	}
	for i := range 1 + r.IntN(2) {
		c := &comp{name: fmt.Sprintf("k%d", i), kind: pick(r, kindSink, kindStatefulSink), par: 1 + r.IntN(4), reuse: r.IntN(4) == 0, zeroCopy: r.IntN(4) == 0}
		for range 1 + r.IntN(2) {
			if len(unread) > 0 {
				subscribe(c, unread[0])
				unread = unread[1:]
			} else {
				subscribe(c, outs[r.IntN(len(outs))])
			}
		}
		sh.comps = append(sh.comps, c)
	}
	for _, o := range unread { // more unread streams than sinks: the last sink reads them
		subscribe(sh.comps[len(sh.comps)-1], o)
	}
	// Drawn from a second generator, so that adding them left the shapes
	// of earlier seeds as they were.
	r2 := rand.New(rand.NewPCG(seed, 0x6b67))
	sh.keyGroups = pick(r2, 0, 0, 4, 5, 7, 1000)
	for _, c := range sh.comps {
		c.explicitIDs = !c.kind.sink() && c.kind != kindSpout && r2.IntN(3) == 0
	}
	sh.dedup = pick(r2, dedup.DefaultConfig(),
		dedup.Config{Window: 1 << 15, FPRate: 0.5, Generations: 2, Exact: 1 << 15},
		dedup.Config{Window: 1 << 16, FPRate: 0.05, Generations: 3, Exact: 1 << 15})
	sh.log = pick(r2, upstreambackup.DefaultConfig(), upstreambackup.Config{MaxEntries: 128, MaxBytes: 4 << 20})
	for {
		o := expect(sh)
		if (o.deliveries <= maxDeliveries && o.bytes <= maxBytes) || sh.comps[0].n <= 4 {
			return sh
		}
		for _, c := range sh.comps {
			if c.kind == kindSpout {
				c.n = max(c.n/2, 1)
			}
		}
	}
}

// Budget of one run: records delivered to bolts and sinks, and the bytes
// of their values, so that a run under the race detector takes seconds.
const (
	maxDeliveries = 20000
	maxBytes      = 48 << 20
)

// ---------------------------------------------------------------------
// Records. Every record is (k, v) or (k, v, w): k is a unique key that
// names the record's path from its root ("s0:17/b1.0/b3.2"), v and w are
// values of the whole value set. What a bolt emits depends only on its
// name and the values of its input, so replays emit the same records and
// the oracle can compute them.

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func hashOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return mix(h.Sum64())
}

// unit maps h to [0, 1).
func unit(h uint64) float64 { return float64(mix(h)>>11) / (1 << 53) }

// payload returns a fresh value for h: empty, unicode and invalid UTF-8
// strings, extreme numbers, NaN, nil, empty, nil and large byte slices,
// lists and maps with nil-ish members, nesting at the depth limit, and
// Go types that Emit widens. Fresh, because Emit owns what it is given.
func payload(h uint64) any {
	sel := h >> 40
	switch h % 20 {
	case 0:
		return ""
	case 1:
		return "héllo wörld ✓ 日本語 🙂 " + strconv.FormatUint(sel, 16)
	case 2:
		return "\x00\xff\xfe not utf-8 " + strconv.FormatUint(sel, 16)
	case 3:
		return int64(h)
	case 4:
		return pick(rand.New(rand.NewPCG(h, 1)), int64(math.MinInt64), int64(math.MaxInt64), 0, -1)
	case 5:
		return h | 1<<63
	case 6:
		return pick(rand.New(rand.NewPCG(h, 2)), math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64, math.MaxFloat64, float64(sel)/3)
	case 7:
		return math.NaN()
	case 8:
		return sel&1 == 0
	case 9:
		return nil
	case 10:
		return []byte{}
	case 11:
		return []byte(nil)
	case 12:
		size := int(sel % 300)
		switch sel % 500 {
		case 0:
			size = 300<<10 + int(sel%997)
		case 1, 2, 3:
			size = 64<<10 + int(sel%997)
		}
		p := make([]byte, size)
		x := h
		for i := range p {
			x = x*6364136223846793005 + 1442695040888963407
			p[i] = byte(x >> 56)
		}
		return p
	case 13:
		return []any{}
	case 14:
		return []any{int64(sel), "x", []any{nil, true, map[string]any{"ü": []byte{1, 2}}}, uint64(7)}
	case 15:
		return map[string]any{}
	case 16:
		return map[string]any{"": nil, "ключ": "значение", "n": int64(-5), "m": map[string]any{"l": []any{1.5, []byte("z")}}}
	case 17:
		return nested(int(sel%2), h)
	case 18:
		switch sel % 7 {
		case 0:
			return int(sel%1000) - 500
		case 1:
			return int32(-7)
		case 2:
			return int8(-128)
		case 3:
			return uint8(255)
		case 4:
			return uint16(sel)
		case 5:
			return float32(1.25)
		}
		return []any{int16(3), uint32(4), map[string]any{"f": float32(-2.5), "u": uint(9)}}
	}
	return []any{nil, []any(nil), map[string]any(nil), []byte(nil), map[string]any{"nb": []byte(nil), "nl": []any(nil)}}
}

// nested returns lists and maps nested as deep as the value set allows
// (wire.MaxDepth, 8), alternating when alt is 1.
func nested(alt int, h uint64) any {
	var v any = int64(h)
	for i := range 8 {
		if alt == 1 && i%2 == 1 {
			v = map[string]any{"d" + strconv.Itoa(i): v}
		} else {
			v = []any{v}
		}
	}
	return v
}

// rootRecord is record i of spout c.
func rootRecord(c *comp, i int64) (string, topology.Values) {
	key := c.name + ":" + strconv.FormatInt(i, 10)
	h := hashOf(key)
	s := c.streams[h%uint64(len(c.streams))]
	vals := topology.Values{key, payload(mix(h ^ 1))}
	if len(s.fields) == 3 {
		vals = append(vals, payload(mix(h^2)))
	}
	return s.name, vals
}

type child struct {
	stream string
	vals   topology.Values
}

// children returns what bolt c emits for an input: 0 to 3 records, each
// on one of its streams, carrying a new value or passing on the input's.
func children(c *comp, in topology.Values) ([]child, error) {
	key, ok := in[0].(string)
	if !ok {
		return nil, fmt.Errorf("%s got a key of type %T", c.name, in[0])
	}
	h := hashOf(c.name, key)
	var n int
	switch r := h % 100; {
	case r < 15:
		n = 0
	case r < 55:
		n = 1
	case r < 80:
		n = 2
	default:
		n = 3
	}
	sep := "/"
	if h&(1<<20) != 0 {
		sep = "／" // a key with multi-byte separators
	}
	out := make([]child, n)
	for j := range n {
		ck := key + sep + c.name + "." + strconv.Itoa(j)
		hj := hashOf(ck)
		s := c.streams[hj%uint64(len(c.streams))]
		vals := topology.Values{ck, payload(mix(hj ^ 1))}
		if len(in) > 1 && (hj>>8)%4 == 0 {
			vals[1] = in[1] // passed on: shared with the input, only read
		}
		if len(s.fields) == 3 {
			w := payload(mix(hj ^ 2))
			if (hj>>16)%4 == 0 {
				w = in[len(in)-1]
			}
			vals = append(vals, w)
		}
		out[j] = child{stream: s.name, vals: vals}
	}
	return out, nil
}

// canon renders values so that two records compare equal exactly when
// the value set's rules make them equal: every signed integer is an
// int64, nil slices and maps are empty ones, and so on (topology.Values).
// Anything outside the set renders as "?" and its type, so it never
// matches what the oracle expects.
func canon(vs topology.Values) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(" | ")
		}
		canonInto(&b, v)
	}
	return b.String()
}

func canonInto(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("nil")
	case bool:
		fmt.Fprintf(b, "bool:%v", x)
	case int:
		fmt.Fprintf(b, "i:%d", x)
	case int8:
		fmt.Fprintf(b, "i:%d", x)
	case int16:
		fmt.Fprintf(b, "i:%d", x)
	case int32:
		fmt.Fprintf(b, "i:%d", x)
	case int64:
		fmt.Fprintf(b, "i:%d", x)
	case uint:
		fmt.Fprintf(b, "u:%d", x)
	case uint8:
		fmt.Fprintf(b, "u:%d", x)
	case uint16:
		fmt.Fprintf(b, "u:%d", x)
	case uint32:
		fmt.Fprintf(b, "u:%d", x)
	case uint64:
		fmt.Fprintf(b, "u:%d", x)
	case float32:
		fmt.Fprintf(b, "f:%x", math.Float64bits(float64(x)))
	case float64:
		fmt.Fprintf(b, "f:%x", math.Float64bits(x))
	case string:
		fmt.Fprintf(b, "s:%q", x)
	case []byte:
		h := fnv.New64a()
		h.Write(x)
		if len(x) <= 16 {
			fmt.Fprintf(b, "b:%x", x)
		} else {
			fmt.Fprintf(b, "b%d:%x", len(x), h.Sum64())
		}
	case []any:
		b.WriteString("[")
		for i, e := range x {
			if i > 0 {
				b.WriteString(",")
			}
			canonInto(b, e)
		}
		b.WriteString("]")
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(b, "%q=", k)
			canonInto(b, x[k])
		}
		b.WriteString("}")
	default:
		fmt.Fprintf(b, "?%T", x)
	}
}

func short(s string) string {
	if len(s) > 140 {
		return s[:140] + "…"
	}
	return s
}

// ---------------------------------------------------------------------
// The oracle.

type item struct {
	vals topology.Values
	n    int
	root string // the root record's key, "s0:17"
	// mult is, in a bolt's inputs, how many of its tasks get each copy:
	// its parallelism with All grouping, else 1. All copies of a record
	// have one ID; they differ by the task that receives them.
	mult int
}

// bag is a multiset of records by canon.
type bag map[string]*item

func (b bag) add(vals topology.Values, n, mult int, root string) {
	k := canon(vals)
	if it := b[k]; it != nil {
		it.n += n
		return
	}
	b[k] = &item{vals: vals, n: n, mult: mult, root: root}
}

type oracle struct {
	out        map[string]map[string]bag // component -> stream -> records emitted
	in         map[string]bag            // bolt or sink -> records it must receive
	roots      int64
	deliveries int
	bytes      int64
	// tree is the most bolt and sink inputs one root's tree has: each is
	// a chance for chaos fail= to fail the whole attempt.
	tree int
}

// multiplier is how many copies of a record a subscription delivers: one
// per task with All grouping, one otherwise.
func multiplier(c *comp, s sub) int {
	if s.g.kind == topology.GroupAll {
		return c.par
	}
	return 1
}

// expect computes what every bolt and sink receives in a run without
// failures: spouts emit their records; a bolt receives, from each
// subscription, every record of the stream (times its parallelism with
// All grouping) and emits children(record) for each.
func expect(sh *shape) *oracle {
	o := &oracle{out: map[string]map[string]bag{}, in: map[string]bag{}}
	perRoot := map[string]int{}
	defer func() {
		for _, n := range perRoot {
			o.tree = max(o.tree, n)
		}
	}()
	for _, c := range sh.comps {
		o.out[c.name] = map[string]bag{}
		for _, s := range c.streams {
			o.out[c.name][s.name] = bag{}
		}
		if c.kind == kindSpout {
			for i := range c.n {
				s, vals := rootRecord(c, i)
				o.out[c.name][s].add(vals, 1, 1, vals[0].(string))
				o.roots++
			}
			continue
		}
		in := bag{}
		for _, s := range c.subs {
			m := multiplier(c, s)
			for _, it := range o.out[s.src][s.stream] {
				in.add(it.vals, it.n*m, m, it.root)
			}
		}
		o.in[c.name] = in
		for _, it := range in {
			perRoot[it.root] += it.n
			o.deliveries += it.n
			o.bytes += int64(it.n) * valueBytes(it.vals)
			if c.kind.sink() {
				continue
			}
			kids, _ := children(c, it.vals)
			for _, k := range kids {
				o.out[c.name][k.stream].add(k.vals, it.n, 1, it.root)
			}
		}
	}
	return o
}

func valueBytes(vs topology.Values) int64 {
	var n int64
	for _, v := range vs {
		switch x := v.(type) {
		case []byte:
			n += int64(len(x))
		case string:
			n += int64(len(x))
		default:
			n += 16
		}
	}
	return n
}

// ---------------------------------------------------------------------
// The running topology: a spout and bolts that record what they do.

// recorder collects, for one run, what every bolt did.
type recorder struct {
	mu        sync.Mutex
	delivered map[string]map[string]int            // bolt -> canon -> Execute calls (failed ones too)
	runs      map[string]map[string]int            // bolt -> canon -> user code runs that acked
	ids       map[string]map[string]map[copyID]int // bolt -> canon -> acked inputs by task and ID
	emitted   map[string]map[string]bag            // component -> stream -> records emitted
	failed    map[string]bool                      // bolt, task, input ID failed once on purpose
	finals    map[string]map[string]map[copyID]int // stateful bolt -> canon -> runs its final state counts
	reports   map[string]int                       // stateful bolt -> tasks that reported a final state
	problems  []string
}

func newRecorder() *recorder {
	return &recorder{
		delivered: map[string]map[string]int{},
		runs:      map[string]map[string]int{},
		ids:       map[string]map[string]map[copyID]int{},
		emitted:   map[string]map[string]bag{},
		failed:    map[string]bool{},
		finals:    map[string]map[string]map[copyID]int{},
		reports:   map[string]int{},
	}
}

// final adds a stateful task's state, as it stands when the task ends, to
// its component's.
func (r *recorder) final(comp string, task int, st state) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports[comp]++
	if r.finals[comp] == nil {
		r.finals[comp] = map[string]map[copyID]int{}
	}
	for k, ids := range st {
		if r.finals[comp][k] == nil {
			r.finals[comp][k] = map[copyID]int{}
		}
		for id, n := range ids {
			r.finals[comp][k][copyID{task, id}] += n
		}
	}
}

// state is a stateful bolt task's state: its runs of user code per input
// record and ID. The runtime snapshots it at checkpoints and restores it
// on a rollback, so with exactly-once it must end as a failure-free run
// leaves it.
type state map[string]map[uint64]int

func (st state) add(k string, id uint64) {
	if st[k] == nil {
		st[k] = map[uint64]int{}
	}
	st[k][id]++
}

func (st state) encode() []byte {
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(st)))
	for k, ids := range st {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(ids)))
		for id, n := range ids {
			b = binary.LittleEndian.AppendUint64(b, id)
			b = binary.AppendUvarint(b, uint64(n))
		}
	}
	return b
}

var errState = errors.New("randshapes: bad state snapshot")

func decodeState(b []byte) (state, error) {
	st := state{}
	if len(b) == 0 {
		return st, nil // a checkpoint of a task that had not started
	}
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			panic(errState)
		}
		b = b[n:]
		return v
	}
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%w: %v", errState, p)
			}
		}()
		for range uv() {
			l := uv()
			k := string(b[:l])
			b = b[l:]
			ids := map[uint64]int{}
			for range uv() {
				id := binary.LittleEndian.Uint64(b)
				b = b[8:]
				ids[id] = int(uv())
			}
			st[k] = ids
		}
	}()
	return st, err
}

func (r *recorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *recorder) deliver(comp, k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.delivered[comp] == nil {
		r.delivered[comp] = map[string]int{}
	}
	r.delivered[comp][k]++
}

// copyID names one copy of a record: its ID and the task that received
// it (-1 where the test cannot know the task: in a flowtest sink).
type copyID struct {
	task int
	id   uint64
}

func (r *recorder) ran(comp, k string, task int, id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[comp] == nil {
		r.runs[comp], r.ids[comp] = map[string]int{}, map[string]map[copyID]int{}
	}
	r.runs[comp][k]++
	if r.ids[comp][k] == nil {
		r.ids[comp][k] = map[copyID]int{}
	}
	r.ids[comp][k][copyID{task, id}]++
}

func (r *recorder) emit(comp, stream, k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.emitted[comp] == nil {
		r.emitted[comp] = map[string]bag{}
	}
	if r.emitted[comp][stream] == nil {
		r.emitted[comp][stream] = bag{}
	}
	b := r.emitted[comp][stream]
	if it := b[k]; it != nil {
		it.n++
		return
	}
	b[k] = &item{n: 1}
}

// failOnce reports whether this is the first delivery of input id to the
// task, and remembers it.
func (r *recorder) failOnce(comp string, task int, id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := fmt.Sprintf("%s/%d/%x", comp, task, id)
	if r.failed[k] {
		return false
	}
	r.failed[k] = true
	return true
}

// env is what every task of one run shares.
type env struct {
	rec      *recorder
	boltFail bool          // bolts with failFirst > 0 fail first deliveries
	pace     time.Duration // how long the spouts take to emit their records
}

var errFirst = errors.New("randshapes: failing a first delivery after a partial emit")

// process is a bolt's user code: emit the input's children and record
// the run, or, for a first delivery chosen by failFirst, emit half of
// them and fail.
func (e *env) process(c *comp, task int, st state, in *topology.Tuple, emit func(stream string, id uint64, vals topology.Values) error) error {
	k := canon(in.Values)
	e.rec.deliver(c.name, k)
	kids, err := children(c, in.Values)
	if err != nil {
		e.rec.problem("%v", err)
		return err
	}
	limit := len(kids)
	fail := e.boltFail && c.failFirst > 0 && unit(in.ID^hashOf(c.name)) < c.failFirst && e.rec.failOnce(c.name, task, in.ID)
	if fail {
		limit /= 2
	}
	for _, kid := range kids[:limit] {
		ck := canon(kid.vals) // before Emit, which owns the values from then on
		var id uint64         // 0: the runtime's
		if c.explicitIDs {
			id = mix(in.ID ^ hashOf(kid.vals[0].(string), strconv.Itoa(task)))
		}
		if err := emit(kid.stream, id, kid.vals); err != nil {
			e.rec.problem("%s[%d] could not emit %s on %s: %v", c.name, task, short(ck), kid.stream, err)
			return err
		}
		e.rec.emit(c.name, kid.stream, ck)
	}
	if fail {
		return errFirst
	}
	e.rec.ran(c.name, k, task, in.ID)
	if st != nil {
		st.add(k, in.ID)
	}
	return nil
}

// genSpout emits a spout's records; task k of p emits i = k, k+p, ...
// With env.pace it spreads them over that long, so that crash chaos
// finds the run still going.
type genSpout struct {
	e                 *env
	c                 *comp
	next, step, index int64
	start             time.Time
	out               topology.SpoutCollector
}

func (s *genSpout) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.out, s.index, s.step = out, int64(tc.Index), int64(tc.Parallelism)
	s.next, s.start = s.index, time.Now()
	return nil
}

func (s *genSpout) Next(context.Context) error {
	for range 32 {
		if s.next >= s.c.n {
			return topology.ErrExhausted
		}
		if d := s.e.pace; d > 0 && time.Since(s.start) < time.Duration(float64(d)*float64(s.next)/float64(s.c.n)) {
			time.Sleep(time.Millisecond)
			return nil
		}
		st, vals := rootRecord(s.c, s.next)
		if err := s.out.EmitTo(st, topology.MsgID{Offset: s.next}, vals); err != nil {
			s.e.rec.problem("%s could not emit root %d: %v", s.c.name, s.next, err)
		}
		s.next += s.step
	}
	return nil
}

func (s *genSpout) Ack(topology.MsgID)  {}
func (s *genSpout) Fail(topology.MsgID) {}
func (s *genSpout) Close() error        { return nil }

func (s *genSpout) Position() ([]byte, error) { return binary.AppendVarint(nil, s.next), nil }

func (s *genSpout) Seek(pos []byte) error {
	n, k := binary.Varint(pos)
	if k <= 0 || n%s.step != s.index {
		return fmt.Errorf("randshapes: bad position %x for task %d of %d", pos, s.index, s.step)
	}
	s.next = n
	s.start = time.Now().Add(-time.Duration(float64(s.e.pace) * float64(n) / float64(s.c.n)))
	return nil
}

type plainBolt struct {
	e    *env
	c    *comp
	task int
	st   state // nil unless stateful
	out  topology.Collector
}

func (b *plainBolt) Prepare(tc topology.TaskContext, out topology.Collector) error {
	b.task, b.out = tc.Index, out
	return nil
}

func (b *plainBolt) Execute(in *topology.Tuple) {
	anchors := []*topology.Tuple{in}
	err := b.e.process(b.c, b.task, b.st, in, func(stream string, id uint64, vals topology.Values) error {
		if id != 0 {
			return b.out.EmitWithID(stream, id, anchors, vals)
		}
		return b.out.EmitTo(stream, anchors, vals)
	})
	if err != nil {
		b.out.FailWith(in, err)
		return
	}
	b.out.Ack(in)
}

func (b *plainBolt) Cleanup() error { return nil }

type statefulBolt struct{ plainBolt }

func (b *statefulBolt) Snapshot() ([]byte, error) { return b.st.encode(), nil }

func (b *statefulBolt) Restore(snap []byte) (err error) {
	b.st, err = decodeState(snap)
	return err
}

func (b *statefulBolt) Cleanup() error {
	b.e.rec.final(b.c.name, b.task, b.st)
	return nil
}

type basicBolt struct {
	e    *env
	c    *comp
	task int
	st   state // nil unless stateful
}

func (b *basicBolt) Prepare(tc topology.TaskContext) error {
	b.task = tc.Index
	return nil
}

func (b *basicBolt) Execute(in *topology.Tuple, out topology.BasicCollector) error {
	return b.e.process(b.c, b.task, b.st, in, func(stream string, id uint64, vals topology.Values) error {
		if id != 0 {
			return out.EmitWithID(stream, id, vals)
		}
		return out.EmitTo(stream, vals)
	})
}

func (b *basicBolt) Cleanup() error { return nil }

type statefulBasic struct{ basicBolt }

func (b *statefulBasic) Snapshot() ([]byte, error) { return b.st.encode(), nil }

func (b *statefulBasic) Restore(snap []byte) (err error) {
	b.st, err = decodeState(snap)
	return err
}

func (b *statefulBasic) Cleanup() error {
	b.e.rec.final(b.c.name, b.task, b.st)
	return nil
}

// build declares sh with fresh tasks that share e, and returns the
// topology and the sinks by name.
func build(sh *shape, e *env, sinkFail float64) (*topology.Topology, map[string]*flowtest.Sink, error) {
	b := topology.NewBuilder(fmt.Sprintf("randshapes-%d", sh.seed))
	if sh.keyGroups > 0 {
		b.KeyGroups(sh.keyGroups)
	}
	sinks := map[string]*flowtest.Sink{}
	for _, c := range sh.comps {
		var decl *topology.Component
		switch c.kind {
		case kindSpout:
			decl = b.Spout(c.name, func() topology.Spout { return &genSpout{e: e, c: c} }, c.par)
		case kindBolt:
			decl = b.Bolt(c.name, func() topology.Bolt { return &plainBolt{e: e, c: c} }, c.par)
		case kindStatefulBolt:
			decl = b.Bolt(c.name, func() topology.Bolt { return &statefulBolt{plainBolt{e: e, c: c, st: state{}}} }, c.par)
		case kindBasic:
			decl = b.BasicBolt(c.name, func() topology.BasicBolt { return &basicBolt{e: e, c: c} }, c.par)
		case kindStatefulBasic:
			decl = b.BasicBolt(c.name, func() topology.BasicBolt { return &statefulBasic{basicBolt{e: e, c: c, st: state{}}} }, c.par)
		case kindSink, kindStatefulSink:
			s := flowtest.NewSink()
			if sinkFail > 0 {
				s.FailFirst(sinkFail)
			}
			sinks[c.name] = s
			fn := s.Bolt
			if c.kind == kindStatefulSink {
				fn = s.StatefulBolt
			}
			decl = b.Bolt(c.name, fn, c.par)
		}
		for _, s := range c.subs {
			decl.InputStream(s.src, s.stream, s.g.build())
		}
		for _, s := range c.streams {
			decl.Stream(s.name, s.fields...)
		}
		if c.reuse {
			decl.ReuseInputs()
		}
		if c.zeroCopy {
			decl.ZeroCopyInputs()
		}
	}
	topo, err := b.Build()
	return topo, sinks, err
}

// ---------------------------------------------------------------------
// Runs.

type runCfg struct {
	name        string
	g           workers.Guarantee
	chaos       chaos.Config
	maxAttempts int     // 0: replay forever
	sinkFail    float64 // flowtest Sink.FailFirst
	boltFail    bool    // bolts' failFirst
	ckpt        time.Duration
	pace        time.Duration // spouts spread their records over this long
}

func (rc runCfg) String() string {
	return fmt.Sprintf("%s: %s chaos=%q max-attempts=%d sink-fail-first=%v bolt-fail-first=%v checkpoint-every=%v pace=%v",
		rc.name, rc.g, rc.chaos.String(), rc.maxAttempts, rc.sinkFail, rc.boltFail, rc.ckpt, rc.pace)
}

func (rc runCfg) crashes() bool { return rc.chaos.CrashEvery > 0 }

// configs returns every run configuration of a seed, with fault rates
// drawn from it.
func configs(seed uint64) []runCfg {
	r := rand.New(rand.NewPCG(seed, 0xc0f1))
	cs := seed*1000 + 7
	return []runCfg{
		{name: "alo-chaos", g: workers.AtLeastOnce,
			chaos:    chaos.Config{Drop: pick(r, 0.01, 0.05, 0.15), Dup: pick(r, 0, 0.02, 0.1), Reorder: pick(r, 0, 0.1), Fail: pick(r, 0.005, 0.02, 0.08), Seed: cs},
			sinkFail: pick(r, 0, 0.1, 0.3), boltFail: true},
		{name: "alo-deadletter", g: workers.AtLeastOnce,
			chaos:       chaos.Config{Drop: pick(r, 0, 0.02), Dup: pick(r, 0, 0.02), Fail: pick(r, 0.1, 0.3), Seed: cs + 1},
			maxAttempts: 1 + r.IntN(3), sinkFail: pick(r, 0, 0.2), boltFail: true},
		{name: "eo-chaos", g: workers.ExactlyOnce,
			chaos:    chaos.Config{Drop: pick(r, 0.01, 0.05), Dup: pick(r, 0, 0.05), Reorder: pick(r, 0, 0.1), Fail: pick(r, 0.005, 0.03), Seed: cs + 2},
			sinkFail: pick(r, 0, 0.1), boltFail: r.IntN(2) == 0, ckpt: pick(r, 100*time.Millisecond, 250*time.Millisecond, 0)},
		{name: "amo-clean", g: workers.AtMostOnce},
		{name: "amo-chaos", g: workers.AtMostOnce,
			chaos:    chaos.Config{Drop: pick(r, 0.01, 0.05, 0.15), Dup: pick(r, 0, 0.05), Reorder: pick(r, 0, 0.1), Seed: cs + 3},
			sinkFail: pick(r, 0, 0.1), boltFail: true},
		// Without checkpoints, crash chaos crashes only workers without
		// spouts or stateful bolts (spouts over rewindable sources, as
		// these are, may be crashed: they read on from the position they
		// wrote); with them (exactly-once), any worker.
		// A crash fails every tree in flight, and recovery takes up to
		// about a second (docs/design-notes.md), so at-least-once crashes
		// no more often: every 300 ms, seed 94 took 84 s and 138 crashes.
		{name: "alo-crash", g: workers.AtLeastOnce,
			chaos:    chaos.Config{Drop: pick(r, 0, 0.02), Fail: pick(r, 0.005, 0.02), CrashEvery: pick(r, 700*time.Millisecond, time.Second), Seed: cs + 4},
			sinkFail: pick(r, 0, 0.1), boltFail: true, pace: 1500 * time.Millisecond},
		{name: "eo-crash", g: workers.ExactlyOnce,
			chaos:    chaos.Config{Drop: pick(r, 0, 0.02), Fail: 0.005, CrashEvery: pick(r, 400*time.Millisecond, 700*time.Millisecond), Seed: cs + 5},
			sinkFail: pick(r, 0, 0.1), boltFail: r.IntN(2) == 0, ckpt: pick(r, 100*time.Millisecond, 200*time.Millisecond), pace: 1500 * time.Millisecond},
		{name: "amo-crash", g: workers.AtMostOnce,
			chaos:    chaos.Config{Drop: pick(r, 0, 0.02), CrashEvery: pick(r, 300*time.Millisecond, 500*time.Millisecond), Seed: cs + 6},
			sinkFail: pick(r, 0, 0.1), boltFail: true, pace: 1500 * time.Millisecond},
		// At least once with checkpoints, as cluster mode runs by default:
		// any worker may crash; one with stateful tasks rolls everything
		// back to the latest checkpoint, one with only stateless tasks has
		// its slot moved and its trees in flight replayed.
		{name: "alo-ckpt-crash", g: workers.AtLeastOnce,
			chaos:    chaos.Config{Drop: pick(r, 0, 0.02), Fail: pick(r, 0.005, 0.02), CrashEvery: pick(r, 500*time.Millisecond, 800*time.Millisecond), Seed: cs + 7},
			sinkFail: pick(r, 0, 0.1), boltFail: r.IntN(2) == 0, ckpt: pick(r, 100*time.Millisecond, 250*time.Millisecond), pace: 1500 * time.Millisecond},
		// Roots given up after a few attempts while workers crash: a
		// crash loses a spout's count of attempts, and a rollback may
		// replay a root that was already dead-lettered. Its first hunt
		// (seed 21) found that dead-lettered trees filled the output logs
		// until they expired (now spoutExec.abandon), and that without
		// checkpoints a crash every 700 ms was too often: the crashed
		// worker's slot moves away and back, its spout tasks lived about
		// 200 ms, seldom wrote where they stood, and read the same roots
		// again, each failing several attempts, for minutes. Their first
		// marks now come sooner (rootMarks.due), so it crashes as often
		// as alo-crash.
		{name: "alo-deadletter-crash", g: workers.AtLeastOnce,
			chaos:       chaos.Config{Drop: pick(r, 0, 0.02), Fail: pick(r, 0.1, 0.3), CrashEvery: pick(r, 700*time.Millisecond, time.Second), Seed: cs + 8},
			maxAttempts: 1 + r.IntN(3), sinkFail: pick(r, 0, 0.2), boltFail: true, pace: 1500 * time.Millisecond},
		{name: "eo-deadletter-crash", g: workers.ExactlyOnce,
			chaos:       chaos.Config{Drop: pick(r, 0, 0.02), Fail: pick(r, 0.1, 0.3), CrashEvery: pick(r, 500*time.Millisecond, 800*time.Millisecond), Seed: cs + 9},
			maxAttempts: 1 + r.IntN(3), sinkFail: pick(r, 0, 0.1), boltFail: r.IntN(2) == 0, ckpt: pick(r, 100*time.Millisecond, 250*time.Millisecond), pace: 1500 * time.Millisecond},
	}
}

// seeds reads ACKFLOW_RANDSHAPES_SEEDS: N (1..N), a-b, or a,b,c.
func seeds(t *testing.T) (list []uint64, hunt bool) {
	env := strings.TrimSpace(os.Getenv("ACKFLOW_RANDSHAPES_SEEDS"))
	if env == "" {
		return []uint64{1, 2, 3, 4}, false
	}
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("ACKFLOW_RANDSHAPES_SEEDS=%q: use N, a-b or a,b,c", env)
		}
		return n
	}
	switch {
	case strings.Contains(env, ","):
		for _, s := range strings.Split(env, ",") {
			if strings.TrimSpace(s) != "" {
				list = append(list, num(s))
			}
		}
	case strings.Contains(env, "-"):
		a, b, _ := strings.Cut(env, "-")
		for s := num(a); s <= num(b); s++ {
			list = append(list, s)
		}
	default:
		for s := uint64(1); s <= num(env); s++ {
			list = append(list, s)
		}
	}
	return list, true
}

// TestRandomShapes draws a shape per seed and runs it under each
// configuration. By default four seeds run two configurations each (the
// eight rotate over the seeds, so each runs once); with
// ACKFLOW_RANDSHAPES_SEEDS every seed runs all eight, or those
// ACKFLOW_RANDSHAPES_CONFIGS names (comma-separated).
func TestRandomShapes(t *testing.T) {
	defer goleak.VerifyNone(t)
	list, hunt := seeds(t)
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("ACKFLOW_RANDSHAPES_CONFIGS"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	for _, seed := range list {
		sh := genShape(seed)
		for i, rc := range configs(seed) {
			if len(only) > 0 && !only[rc.name] {
				continue
			}
			if n := len(configs(0)); !hunt && len(only) == 0 && i != int(2*seed)%n && i != int(2*seed+1)%n {
				continue
			}
			t.Run(fmt.Sprintf("seed=%d/%s", seed, rc.name), func(t *testing.T) { runOne(t, sh, rc, hunt) })
		}
	}
}

// TestShapesThatFoundBugs runs again, several times each, seeds and
// configurations whose hunts found a bug that shows in only some runs,
// so that a default go test would catch its return.
func TestShapesThatFoundBugs(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, f := range []struct {
		seed   uint64
		config string
		runs   int
	}{
		// At most once without faults, about one run in five ended with
		// hundreds of records in flight: a spout said its source was done
		// while a partial frame waited in its outbox, and a stale report
		// of 0 records in flight stood for three of the leader's rounds
		// (workers: spoutExec.showExhausted, quietKey.drained).
		{12, "amo-clean", 25},
		{26, "amo-clean", 25},
	} {
		sh := genShape(f.seed)
		i := slices.IndexFunc(configs(f.seed), func(rc runCfg) bool { return rc.name == f.config })
		if i < 0 {
			t.Fatalf("no configuration %s", f.config)
		}
		rc := configs(f.seed)[i]
		for run := range f.runs {
			t.Run(fmt.Sprintf("seed=%d/%s/run=%d", f.seed, f.config, run+1), func(t *testing.T) { runOne(t, sh, rc, false) })
		}
	}
}

// tail is the last n lines of a run's log.
func tail(logs *testbuf.Buffer, n int) string {
	lines := logs.Lines()
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d earlier lines)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func runOne(t *testing.T, sh *shape, rc runCfg, hunt bool) {
	o := expect(sh)
	rc.chaos.Fail = failCap(rc, o)
	e := &env{rec: newRecorder(), boltFail: rc.boltFail, pace: rc.pace}
	topo, sinks, err := build(sh, e, rc.sinkFail)
	if err != nil {
		t.Fatalf("%v\n%s", err, sh)
	}
	logs := &testbuf.Buffer{}
	lg := zerolog.New(logs).Level(zerolog.WarnLevel)
	timeout := 60 * time.Second
	if hunt {
		timeout = 90 * time.Second
	}
	repro := fmt.Sprintf("reproduce: ACKFLOW_RANDSHAPES_SEEDS=%d-%d ACKFLOW_RANDSHAPES_CONFIGS=%s go test ./randshapes/ -run 'TestRandomShapes/seed=%d/' -v", sh.seed, sh.seed, rc.name, sh.seed)
	start := time.Now()
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: rc.g,
		Workers:   workersFor(sh, rc),
		Chaos:     rc.chaos,
		Timeout:   timeout,
		Logger:    &lg,
		Configure: func(c *workers.Config) {
			c.BatchSize, c.MaxSpoutPending, c.Ackers, c.QueueSize = sh.batch, sh.pending, sh.ackers, sh.que
			c.MaxAttempts = rc.maxAttempts
			c.ReplayBackoff, c.MaxReplayBackoff = 10*time.Millisecond, 200*time.Millisecond
			c.CheckpointEvery = rc.ckpt
			c.Dedup, c.Log = sh.dedup, sh.log
		},
	})
	if err != nil {
		var sl string
		if sum != nil {
			sl = summaryLine(sum)
		}
		t.Fatalf("run failed after %v: %v\n%s\nconfig %s (largest tree %d inputs)\n%s\nsummary: %s\nlogs:\n%s", time.Since(start).Round(time.Millisecond), err, repro, rc, o.tree, sh, sl, tail(logs, 30))
	}
	problems, notes := compare(sh, rc, o, e.rec, sinks, sum)
	for _, n := range notes {
		t.Log(n)
	}
	t.Logf("%v, %d roots, %d deliveries expected; records %d, dropped %d, duplicated %d, inputs failed %d, resent %d, dead-lettered %d, crashes %d, rollbacks %d",
		sum.Duration.Round(time.Millisecond), o.roots, o.deliveries, sum.Records, sum.Chaos.RecordsDropped, sum.Chaos.RecordsDuplicated, sum.Chaos.InputsFailed, sum.Resent, sum.DeadLettered, sum.Crashes, sum.Checkpoints.Rollbacks)
	if len(problems) > 0 {
		t.Errorf("%s\nconfig %s\n%s%d problems:\n  %s\nsummary: %s\nlogs:\n%s", repro, rc, sh, len(problems), strings.Join(problems, "\n  "), summaryLine(sum), tail(logs, 30))
	}
}

// failCap bounds chaos fail= for runs that replay forever. It fails
// every input of every attempt with its probability, duplicates that
// dedup drops included, so a tree of n inputs completes an attempt with
// probability (1-fail)^n: at 0.08 a tree of 188 inputs never does and
// the run replays until its timeout. Capped, the largest tree completes
// at least every other attempt.
func failCap(rc runCfg, o *oracle) float64 {
	if rc.maxAttempts > 0 || o.tree == 0 {
		return rc.chaos.Fail
	}
	return min(rc.chaos.Fail, 1-math.Pow(0.5, 1/float64(o.tree)))
}

// workersFor is the shape's workers, at least 2 with crash chaos: one
// keeps the spouts and stateful bolts.
func workersFor(sh *shape, rc runCfg) int {
	if rc.crashes() {
		return max(sh.workers, 2)
	}
	return sh.workers
}

func summaryLine(s *workers.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "source records %d, records %d, unaccounted %d, discarded %d, fenced %d, publish errors %d, log entries %d, bad frames %d, lost frames %d, NACKs %d, resent %d, resend misses %d, dup frames %d, chaos %+v, dead-lettered %d",
		s.SourceRecords, s.Records, s.Unaccounted, s.Discarded, s.FencedRecords, s.PublishErrors, s.LogEntries, s.BadFrames, s.LostFrames, s.NACKs, s.Resent, s.ResendMisses, s.DuplicateFrames, s.Chaos, s.DeadLettered)
	for _, c := range s.Components {
		fmt.Fprintf(&b, "\n    %s: emitted %d executed %d acked %d failed %d replayed %d timed-out %d dups-dropped %d re-emitted %d re-executed %d suspects %d parked %d log-peak %d log-expired %d dead-lettered %d emit-errors %d panics %d",
			c.Name, c.Emitted, c.Executed, c.Acked, c.Failed, c.Replayed, c.TimedOut, c.DuplicatesDropped, c.ReEmitted, c.ReExecuted, c.Suspects, c.Parked, c.LogPeakEntries, c.LogExpired, c.DeadLettered, c.EmitErrors, c.Panics)
	}
	return b.String()
}

// got is what one bolt or sink did, by canon: acked runs of user code,
// and how often each copy ran. A bolt's copies are (task, ID); a sink's
// are IDs, since a flowtest sink does not say which of its tasks received
// a record, so that one sink copy stands for mult tasks' copies.
type got struct {
	runs   map[string]int
	copies map[string]map[copyID]int
	sink   bool
}

func gotOf(c *comp, rec *recorder, sinks map[string]*flowtest.Sink) got {
	if s := sinks[c.name]; s != nil {
		g := got{runs: map[string]int{}, copies: map[string]map[copyID]int{}, sink: true}
		for _, r := range s.Records() {
			k := canon(r.Values)
			g.runs[k]++
			if g.copies[k] == nil {
				g.copies[k] = map[copyID]int{}
			}
			g.copies[k][copyID{-1, r.ID}]++
		}
		return g
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	g := got{runs: map[string]int{}, copies: map[string]map[copyID]int{}}
	for k, n := range rec.runs[c.name] {
		g.runs[k], g.copies[k] = n, rec.ids[c.name][k]
	}
	return g
}

// compare checks a run against the oracle and returns what is wrong.
//
// At-least-once and exactly-once: every bolt and sink acks every copy of
// each expected record (a copy is a record ID at one task; IDs are
// deterministic across replays, so there are no other copies), unless its
// root went to the dead letters; a stateful one, behind dedup, runs its
// user code once per copy (at most once for a dead-lettered root).
//
// At-most-once: nothing runs more often than the oracle allows, nothing
// unexpected arrives, a run without faults delivers everything, and what
// a bolt or sink received falls short of what its upstreams really
// emitted by no more than the records the runtime counts as lost.
func compare(sh *shape, rc runCfg, o *oracle, rec *recorder, sinks map[string]*flowtest.Sink, sum *workers.Summary) (problems, notes []string) {
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	rec.mu.Lock()
	problems = append(problems, rec.problems...)
	rec.mu.Unlock()

	// SourceRecords is the spouts' Emitted: it counts again what they read
	// after rewinding to a checkpoint, and what a spout task started again
	// after a crash reads again from the position its predecessor wrote
	// (at most once, what that one read but never sent; at least once,
	// its roots not yet done, and those done since it wrote).
	reread := sum.Checkpoints.Rollbacks > 0 || rc.g != workers.ExactlyOnce && rc.crashes()
	switch {
	case sum.SourceRecords != o.roots && !reread, sum.SourceRecords < o.roots:
		add("summary: SourceRecords %d, the spouts hold %d roots", sum.SourceRecords, o.roots)
	case sum.SourceRecords != o.roots:
		notes = append(notes, fmt.Sprintf("summary: SourceRecords %d, the spouts hold %d roots (%d rollbacks; read again after a rewind or a crash)", sum.SourceRecords, o.roots, sum.Checkpoints.Rollbacks))
	}
	if sum.BadFrames > 0 {
		add("summary: %d bad frames", sum.BadFrames)
	}
	for _, c := range sum.Components {
		if c.Panics > 0 || c.EmitErrors > 0 {
			add("summary: %s had %d panics and %d emit errors", c.Name, c.Panics, c.EmitErrors)
		}
	}
	if sum.DeadLettered != int64(len(sum.DeadLetters)) {
		add("summary: DeadLettered %d but %d dead letters", sum.DeadLettered, len(sum.DeadLetters))
	}
	dead := map[string]bool{}
	for _, l := range sum.DeadLetters {
		dead[fmt.Sprintf("%s:%d", l.Spout, l.Offset)] = true
	}
	if len(dead) > 0 && (rc.g == workers.AtMostOnce || rc.maxAttempts == 0) {
		add("%d roots dead-lettered with max attempts %d under %s", len(dead), rc.maxAttempts, rc.g)
	}

	// rerouted: after a crash, local-or-shuffle may send a replay to
	// another task than the original (it picks among the tasks in the
	// emitter's worker), so a copy's ID can reach a second task, which
	// rightly runs it. rolledBack: with checkpoints, a crash rolls back
	// and bolts run again, so only state, not what user code did, must be
	// exact.
	rerouted := rc.crashes() && hasLocalOrShuffle(sh)
	rolledBack := rc.crashes() && (rc.g == workers.ExactlyOnce || rc.ckpt > 0)
	for _, c := range sh.comps {
		if c.kind == kindSpout {
			continue
		}
		want, g := o.in[c.name], gotOf(c, rec, sinks)
		var missing, extraIDs, wrongRuns, unexpected, wrongState []string
		for k, it := range want {
			// per is how many runs one observed copy stands for.
			per := 1
			if g.sink {
				per = it.mult
			}
			covered, over := 0, 0
			for _, n := range g.copies[k] {
				covered += min(n, per)
				if n > per {
					over++
				}
			}
			distinct, runs := len(g.copies[k]), g.runs[k]
			switch {
			case rc.g == workers.AtMostOnce:
				if runs > it.n || over > 0 {
					wrongRuns = append(wrongRuns, fmt.Sprintf("%s ran %d times (%d copies more than once), at most %d allowed (root %s)", short(k), runs, over, it.n, it.root))
				} else if !rc.chaos.Any() && rc.sinkFail == 0 && !rc.boltFail && runs != it.n {
					missing = append(missing, fmt.Sprintf("%s ran %d times without faults, want %d (root %s)", short(k), runs, it.n, it.root))
				}
			default:
				if covered < it.n && !dead[it.root] {
					missing = append(missing, fmt.Sprintf("%s acked for %d of %d copies (root %s)", short(k), covered, it.n, it.root))
				}
				if distinct > it.n/per && !rerouted {
					extraIDs = append(extraIDs, fmt.Sprintf("%s arrived as %d distinct copies, want %d (root %s)", short(k), distinct, it.n/per, it.root))
				}
				if c.kind.stateful() && !rerouted && !rolledBack && (runs > it.n || over > 0 || (runs < it.n && !dead[it.root])) {
					wrongRuns = append(wrongRuns, fmt.Sprintf("%s ran %d times behind dedup (%d copies more than once), want %d (root %s, dead-lettered %v)", short(k), runs, over, it.n, it.root, dead[it.root]))
				}
			}
		}
		for k, n := range g.runs {
			if want[k] == nil {
				unexpected = append(unexpected, fmt.Sprintf("%s ran %d times", short(k), n))
			}
		}
		// The state a stateful bolt's tasks end with counts every copy
		// once, rollbacks or not, when every task reported it (a task
		// crashed after the final checkpoint never reaches Cleanup).
		rec.mu.Lock()
		final, reports := rec.finals[c.name], rec.reports[c.name]
		rec.mu.Unlock()
		if c.kind.stateful() && !g.sink && rc.g != workers.AtMostOnce {
			if reports != c.par {
				notes = append(notes, fmt.Sprintf("%s: %d of %d tasks reported their final state; not checked", c.name, reports, c.par))
			} else {
				for k, it := range want {
					total, over := 0, 0
					for _, n := range final[k] {
						total += n
						if n > 1 {
							over++
						}
					}
					switch {
					case total < it.n && !dead[it.root]:
						wrongState = append(wrongState, fmt.Sprintf("%s counted %d times, want %d (root %s)", short(k), total, it.n, it.root))
					case (total > it.n || over > 0) && !rerouted:
						wrongState = append(wrongState, fmt.Sprintf("%s counted %d times (%d copies more than once), want %d (root %s)", short(k), total, over, it.n, it.root))
					}
				}
				for k, ids := range final {
					if want[k] == nil {
						wrongState = append(wrongState, fmt.Sprintf("%s counted for %d copies, but never expected", short(k), len(ids)))
					}
				}
			}
		}
		report := func(what string, xs []string) {
			if len(xs) == 0 {
				return
			}
			sort.Strings(xs)
			add("%s %s: %d records; e.g. %s", c.name, what, len(xs), strings.Join(xs[:min(len(xs), 4)], "; "))
		}
		report("SILENT LOSS (missing, root not dead-lettered)", missing)
		report("extra record IDs", extraIDs)
		report("wrong run counts", wrongRuns)
		report("unexpected records", unexpected)
		report("wrong final state", wrongState)
	}
	if rc.g == workers.AtMostOnce {
		p, n := amoAccounting(sh, o, rec, sinks, sum)
		problems, notes = append(problems, p...), append(notes, n)
	}
	return problems, notes
}

func hasLocalOrShuffle(sh *shape) bool {
	for _, c := range sh.comps {
		for _, s := range c.subs {
			if s.g.kind == topology.GroupLocalOrShuffle {
				return true
			}
		}
	}
	return false
}

// amoAccounting compares, at-most-once, what each bolt and sink received
// with what its upstreams really emitted: a shortfall beyond the records
// the runtime counts as dropped or unaccounted is silent loss, and an
// excess is a record processed twice.
func amoAccounting(sh *shape, o *oracle, rec *recorder, sinks map[string]*flowtest.Sink, sum *workers.Summary) (problems []string, note string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var shortfall int64
	for _, c := range sh.comps {
		if c.kind == kindSpout {
			continue
		}
		exp := map[string]int{}
		for _, s := range c.subs {
			src := o.out[s.src][s.stream]
			if sh.comp(s.src).kind != kindSpout {
				src = rec.emitted[s.src][s.stream]
			}
			for k, it := range src {
				exp[k] += it.n * multiplier(c, s)
			}
		}
		recv := rec.delivered[c.name]
		var failures int64
		if s := sinks[c.name]; s != nil {
			recv = map[string]int{}
			for _, r := range s.Records() {
				recv[canon(r.Values)]++
			}
			failures = int64(s.Failures())
		}
		var missing int64
		for k, n := range exp {
			if recv[k] < n {
				missing += int64(n - recv[k])
			}
		}
		for k, n := range recv {
			if n > exp[k] {
				problems = append(problems, fmt.Sprintf("%s received %s %d times, its upstreams emitted it %d times", c.name, short(k), n, exp[k]))
			}
		}
		shortfall += max(0, missing-failures)
	}
	// Fenced records (from a crashed worker's earlier incarnation) are
	// dropped and counted, what is still in flight at the end is
	// unaccounted, and what stopping or crashing tasks dropped (queued
	// for them, left unsent in their outboxes, or unpublishable) is
	// discarded.
	accounted := sum.Chaos.RecordsDropped + sum.Unaccounted + sum.FencedRecords + sum.Discarded
	if shortfall > accounted {
		problems = append(problems, fmt.Sprintf("SILENT LOSS: %d deliveries missing between emitter and receiver, the runtime accounts for %d (%d dropped by chaos, %d unaccounted, %d fenced, %d discarded)",
			shortfall, accounted, sum.Chaos.RecordsDropped, sum.Unaccounted, sum.FencedRecords, sum.Discarded))
	}
	return problems, fmt.Sprintf("at-most-once: %d deliveries short of what was emitted; %d dropped by chaos, %d unaccounted, %d fenced, %d discarded; %d publish errors",
		shortfall, sum.Chaos.RecordsDropped, sum.Unaccounted, sum.FencedRecords, sum.Discarded, sum.PublishErrors)
}

// ---------------------------------------------------------------------
// Checks of the test's own parts.

// TestOracleCounts checks the oracle on a hand-computed shape: All
// grouping multiplies by the subscriber's parallelism, two subscriptions
// add up, and children follow children().
func TestOracleCounts(t *testing.T) {
	st := []stream{{name: topology.DefaultStream, fields: []string{"k", "v"}}}
	sp := &comp{name: "s0", kind: kindSpout, par: 2, n: 10, streams: st}
	b0 := &comp{name: "b0", kind: kindBolt, par: 3, streams: st, subs: []sub{{src: "s0", stream: topology.DefaultStream, g: grouping{kind: topology.GroupAll}}}}
	k0 := &comp{name: "k0", kind: kindSink, par: 2, subs: []sub{
		{src: "s0", stream: topology.DefaultStream, g: grouping{kind: topology.GroupAll}},
		{src: "b0", stream: topology.DefaultStream, g: grouping{kind: topology.GroupShuffle}},
	}}
	o := expect(&shape{comps: []*comp{sp, b0, k0}})
	if o.roots != 10 {
		t.Fatalf("roots %d, want 10", o.roots)
	}
	total := func(b bag) (n int) {
		for _, it := range b {
			n += it.n
		}
		return n
	}
	if got := total(o.in["b0"]); got != 30 {
		t.Fatalf("b0 receives %d records, want 10 roots x 3 tasks", got)
	}
	kids := 0
	for i := range int64(10) {
		_, vals := rootRecord(sp, i)
		c, err := children(b0, vals)
		if err != nil {
			t.Fatal(err)
		}
		kids += len(c)
	}
	if got, want := total(o.in["k0"]), 10*2+3*kids; got != want {
		t.Fatalf("k0 receives %d records, want %d (roots x 2 tasks + b0's %d children x 3 tasks)", got, want, kids)
	}
}

// TestPayloadsAreInTheValueSet: every payload kind passes Emit's
// normalisation, and canon gives a value and its normalised form the
// same rendering, as the oracle relies on.
func TestPayloadsAreInTheValueSet(t *testing.T) {
	for h := range uint64(2000) {
		h := mix(h)
		before := canon(topology.Values{payload(h)})
		vs := topology.Values{payload(h)}
		if _, err := topology.NormalizeValues(vs); err != nil {
			t.Fatalf("payload %d (%s) is refused: %v", h%20, short(before), err)
		}
		if after := canon(vs); after != before {
			t.Fatalf("payload %d renders %s before normalisation and %s after", h%20, short(before), short(after))
		}
	}
}

// TestShapesBuild: the shapes of many seeds are valid topologies within
// the budget.
func TestShapesBuild(t *testing.T) {
	for seed := range uint64(20) {
		sh := genShape(seed)
		if _, _, err := build(sh, &env{rec: newRecorder()}, 0); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, sh)
		}
		if o := expect(sh); o.deliveries > maxDeliveries && sh.comps[0].n > 4 {
			t.Fatalf("seed %d: %d deliveries over the budget\n%s", seed, o.deliveries, sh)
		}
	}
}
