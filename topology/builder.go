package topology

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Builder assembles a topology. Methods record mistakes instead of
// returning errors one by one; Build reports all of them.
type Builder struct {
	name       string
	components []*Component
	byName     map[string]*Component
	errs       []error
	keyGroups  int
}

// Component is a spout or bolt declaration; the methods on it continue the
// declaration and return it for chaining.
type Component struct {
	b           *Builder
	Name        string
	Parallelism int
	SpoutFn     func() Spout // set for spouts
	BoltFn      func() Bolt  // set for bolts
	Streams     map[string]*Schema
	streamOrder []string
	Inputs      []Subscription
	TickEvery   time.Duration
	// Keyed: the bolt keeps keyed state (TaskContext.State).
	Keyed bool
	// InputsReused: the runtime may reuse an input's Tuple once Execute
	// returned with the input acked or failed (ReuseInputs).
	InputsReused bool
	// ZeroCopy: input strings may share the bytes of the NATS message
	// they came in (ZeroCopyInputs).
	ZeroCopy bool
}

// Subscription is a bolt's input: a stream of another component and how it
// is grouped over the bolt's tasks.
type Subscription struct {
	Source   string
	Stream   string
	Grouping Grouping
	// FieldIdx are the positions of Grouping.Fields in the source stream,
	// filled in by Build.
	FieldIdx []int
}

// IsSpout reports whether the component is a spout.
func (c *Component) IsSpout() bool { return c.SpoutFn != nil }

// StreamNames returns the declared streams in declaration order.
func (c *Component) StreamNames() []string { return c.streamOrder }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// NewBuilder starts a topology. The name becomes part of NATS subjects, so it
// is letters, digits, '-' and '_'.
func NewBuilder(name string) *Builder {
	b := &Builder{name: name, byName: map[string]*Component{}}
	if !nameRE.MatchString(name) {
		b.errs = append(b.errs, fmt.Errorf("topology name %q: use letters, digits, '-' and '_' (it is part of NATS subjects)", name))
	}
	return b
}

// MaxParallelism is the most tasks a component may have. Every task of a
// topology keeps per-destination state for the tasks it sends to, so the
// bound keeps a topology's memory within what one machine holds; it is
// also checked where a parallelism arrives from outside (--parallelism,
// submissions in the cluster's buckets).
const MaxParallelism = 1024

func (b *Builder) add(name string, parallelism int) *Component {
	c := &Component{b: b, Name: name, Parallelism: parallelism, Streams: map[string]*Schema{}}
	switch {
	case !nameRE.MatchString(name):
		b.errs = append(b.errs, fmt.Errorf("component name %q: use letters, digits, '-' and '_' and do not start with '_' (reserved for system components)", name))
	case b.byName[name] != nil:
		b.errs = append(b.errs, fmt.Errorf("component %q is declared twice", name))
	}
	if parallelism < 1 || parallelism > MaxParallelism {
		b.errs = append(b.errs, fmt.Errorf("component %q has parallelism %d; it must be from 1 to %d", name, parallelism, MaxParallelism))
	}
	if b.byName[name] == nil {
		b.byName[name] = c
	}
	b.components = append(b.components, c)
	return c
}

// Spout declares a spout with a factory that makes one instance per task.
// The runtime also calls the factory to look at an instance's type
// (Positioned) when it plans a run, and drops that instance unopened: a
// factory only constructs, and whatever needs opening opens in Open.
func (b *Builder) Spout(name string, factory func() Spout, parallelism int) *Component {
	c := b.add(name, parallelism)
	c.SpoutFn = factory
	if factory == nil {
		b.errs = append(b.errs, fmt.Errorf("spout %q has a nil factory", name))
	}
	return c
}

// Bolt declares a bolt with a factory that makes one instance per task.
// The runtime also calls the factory to look at an instance's type
// (Stateful, Transactional) when it plans a run or a generation, and drops
// that instance unprepared: a factory only constructs, and whatever needs
// opening (files, connections) opens in Prepare.
func (b *Builder) Bolt(name string, factory func() Bolt, parallelism int) *Component {
	c := b.add(name, parallelism)
	c.BoltFn = factory
	if factory == nil {
		b.errs = append(b.errs, fmt.Errorf("bolt %q has a nil factory", name))
	}
	return c
}

// BasicBolt declares a bolt that is acked automatically after Execute.
func (b *Builder) BasicBolt(name string, factory func() BasicBolt, parallelism int) *Component {
	var fn func() Bolt
	if factory != nil {
		fn = func() Bolt { return AsBolt(factory()) }
	}
	return b.Bolt(name, fn, parallelism)
}

// Outputs declares the fields of the default stream.
func (c *Component) Outputs(fields ...string) *Component { return c.Stream(DefaultStream, fields...) }

// Stream declares a named output stream and its fields.
func (c *Component) Stream(name string, fields ...string) *Component {
	if _, dup := c.Streams[name]; dup {
		c.b.errs = append(c.b.errs, fmt.Errorf("component %q declares stream %q twice", c.Name, name))
		return c
	}
	if name == "" || strings.HasPrefix(name, "__") {
		c.b.errs = append(c.b.errs, fmt.Errorf("component %q: stream name %q is empty or reserved (starts with __)", c.Name, name))
	}
	seen := map[string]bool{}
	for _, f := range fields {
		if seen[f] {
			c.b.errs = append(c.b.errs, fmt.Errorf("component %q stream %q declares field %q twice", c.Name, name, f))
		}
		seen[f] = true
	}
	c.Streams[name] = NewSchema(fields...)
	c.streamOrder = append(c.streamOrder, name)
	return c
}

// Input subscribes the bolt to source's default stream.
func (c *Component) Input(source string, g Grouping) *Component {
	return c.InputStream(source, DefaultStream, g)
}

// InputStream subscribes the bolt to a named stream of source.
func (c *Component) InputStream(source, stream string, g Grouping) *Component {
	if c.IsSpout() {
		c.b.errs = append(c.b.errs, fmt.Errorf("spout %q cannot subscribe to %q: only bolts have inputs", c.Name, source))
		return c
	}
	c.Inputs = append(c.Inputs, Subscription{Source: source, Stream: stream, Grouping: g})
	return c
}

// KeyedState gives the bolt's tasks a keyed State (TaskContext.State),
// which the runtime snapshots at checkpoints and restores after failures;
// the bolt is then stateful.
func (c *Component) KeyedState() *Component {
	if c.IsSpout() {
		c.b.errs = append(c.b.errs, fmt.Errorf("spout %q cannot keep keyed state; a spout's state is its source position (topology.Positioned)", c.Name))
	}
	c.Keyed = true
	return c
}

// ReuseInputs lets the runtime reuse a bolt's input Tuple for a later input
// once Execute has returned with the input acked or failed, as a BasicBolt's
// always is, instead of allocating a Tuple per record (a third of the bytes
// word count allocated). It is a promise that the bolt keeps no pointer to
// an input it has acked or failed, as the Tuple doc asks: a bolt that broke
// it would later read another record's tuple without any error, which is
// why it is a choice and not the default (Flink's object reuse is opt-in for
// the same reason). The input's Values stay the bolt's to keep, and an input
// acked after Execute returned is never reused while the bolt holds it.
func (c *Component) ReuseInputs() *Component {
	if c.IsSpout() {
		c.b.errs = append(c.b.errs, fmt.Errorf("spout %q has no inputs to reuse; ReuseInputs is for bolts", c.Name))
	}
	c.InputsReused = true
	return c
}

// ZeroCopyInputs lets the runtime give the bolt input strings that share
// the bytes of the NATS message their record came in, instead of a copy
// of each: the decoder then allocates one array of string headers per
// frame instead of one object per string (word count with dedup took 7%
// less CPU per record with it). It is a promise about memory, not
// correctness, since nothing ever changes those bytes: a string the bolt
// keeps after Execute keeps the whole message alive, up to a MiB, and so
// does one it emits for as long as the runtime holds the output (until it
// is sent, or, in a bolt with keyed state and dedup, until its tree
// completes). Choose it for a bolt that keeps no input string, or copies
// (strings.Clone) what it keeps; keyed state (Counters, Map) copies its
// keys. Records from a task in the same worker are never encoded, and
// share the emitter's strings either way.
func (c *Component) ZeroCopyInputs() *Component {
	if c.IsSpout() {
		c.b.errs = append(c.b.errs, fmt.Errorf("spout %q has no inputs; ZeroCopyInputs is for bolts", c.Name))
	}
	c.ZeroCopy = true
	return c
}

// KeyGroups sets the number of key groups (default DefaultKeyGroups): the
// fixed number of parts that keyed state and Fields grouping split keys
// into. It bounds the parallelism of keyed components.
func (b *Builder) KeyGroups(n int) *Builder {
	if n < 1 || n > 1<<15 {
		b.errs = append(b.errs, fmt.Errorf("key groups %d: use 1 to 32768", n))
	}
	b.keyGroups = n
	return b
}

// Tick makes the runtime deliver a tick tuple (stream TickStream) every d.
func (c *Component) Tick(d time.Duration) *Component {
	if d <= 0 {
		c.b.errs = append(c.b.errs, fmt.Errorf("component %q: tick interval %v must be positive", c.Name, d))
	}
	c.TickEvery = d
	return c
}

// Topology is a validated topology, ready to run.
type Topology struct {
	Name       string
	Components []*Component // in declaration order
	KeyGroups  int          // key groups of keyed state and Fields grouping
	byName     map[string]*Component
}

// Component returns the named component or nil.
func (t *Topology) Component(name string) *Component { return t.byName[name] }

// Subscribers returns, for a component's stream, every (bolt, subscription).
func (t *Topology) Subscribers(source, stream string) []Subscriber {
	var out []Subscriber
	for _, c := range t.Components {
		for i := range c.Inputs {
			s := &c.Inputs[i]
			if s.Source == source && s.Stream == stream {
				out = append(out, Subscriber{Bolt: c, Sub: s})
			}
		}
	}
	return out
}

// Subscriber is one bolt subscribed to a stream.
type Subscriber struct {
	Bolt *Component
	Sub  *Subscription
}

// ErrInvalid wraps every validation error returned by Build.
var ErrInvalid = errors.New("topology: invalid")

// Build validates the declarations and returns the topology, or an error
// listing every problem found.
func (b *Builder) Build() (*Topology, error) {
	errs := append([]error(nil), b.errs...)
	if len(b.components) == 0 {
		errs = append(errs, errors.New("the topology has no components; add at least one spout"))
	}
	spouts := 0
	for _, c := range b.components {
		if c.IsSpout() {
			spouts++
			continue
		}
		if len(c.Inputs) == 0 {
			errs = append(errs, fmt.Errorf("bolt %q has no inputs; subscribe it with Input(component, grouping)", c.Name))
		}
		subscribed := map[[2]string]bool{}
		for i := range c.Inputs {
			s := &c.Inputs[i]
			if key := [2]string{s.Source, s.Stream}; subscribed[key] {
				errs = append(errs, fmt.Errorf("bolt %q subscribes to %s/%s twice; each record would reach it twice with the same ID and dedup would drop one; subscribe once", c.Name, s.Source, s.Stream))
			} else {
				subscribed[key] = true
			}
			src := b.byName[s.Source]
			if src == nil {
				errs = append(errs, fmt.Errorf("bolt %q subscribes to unknown component %q", c.Name, s.Source))
				continue
			}
			fields, ok := src.Streams[s.Stream]
			if !ok {
				errs = append(errs, fmt.Errorf("bolt %q subscribes to stream %q of %q, which declares %s", c.Name, s.Stream, s.Source, listOrNone(src.streamOrder)))
				continue
			}
			switch s.Grouping.Kind {
			case GroupShuffle, GroupAll, GroupGlobal, GroupDirect, GroupLocalOrShuffle:
			case GroupFields:
				if len(s.Grouping.Fields) == 0 {
					errs = append(errs, fmt.Errorf("bolt %q: fields grouping on %s/%s names no fields", c.Name, s.Source, s.Stream))
				}
				s.FieldIdx = s.FieldIdx[:0]
				for _, f := range s.Grouping.Fields {
					idx := fields.Index(f)
					if idx < 0 {
						errs = append(errs, fmt.Errorf("bolt %q groups %s/%s by field %q, which the stream does not declare (it has %s)", c.Name, s.Source, s.Stream, f, listOrNone(fields.Names())))
						continue
					}
					s.FieldIdx = append(s.FieldIdx, idx)
				}
			default:
				errs = append(errs, fmt.Errorf("bolt %q: subscription to %s/%s has no grouping; use topology.Shuffle(), Fields(...), All(), Global(), Direct() or LocalOrShuffle()", c.Name, s.Source, s.Stream))
			}
		}
	}
	errs = append(errs, b.directStreams()...)
	for _, c := range b.components {
		if c.Keyed && c.Parallelism > b.groups() {
			errs = append(errs, fmt.Errorf("component %q has parallelism %d, more than the %d key groups its keyed state is split into; raise KeyGroups", c.Name, c.Parallelism, b.groups()))
		}
	}
	if spouts == 0 && len(b.components) > 0 {
		errs = append(errs, errors.New("the topology has no spout: nothing would ever emit"))
	}
	if cyc := b.cycle(); cyc != nil {
		errs = append(errs, fmt.Errorf("the topology has a cycle: %s", strings.Join(cyc, " -> ")))
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%w: topology %q: %s", ErrInvalid, b.name, strings.Join(msgs, "; "))
	}
	return &Topology{Name: b.name, Components: b.components, KeyGroups: b.groups(), byName: b.byName}, nil
}

func (b *Builder) groups() int {
	if b.keyGroups > 0 {
		return b.keyGroups
	}
	return DefaultKeyGroups
}

// directStreams checks that every stream is either direct (all its
// subscribers use the Direct grouping and the emitter calls EmitDirect) or
// not (none does): a plain emit on a stream with a Direct subscriber would
// silently skip it, as Storm's declared direct streams prevent.
func (b *Builder) directStreams() []error {
	type sub struct{ bolt, grouping string }
	subs := map[[2]string][]sub{}
	var order [][2]string
	for _, c := range b.components {
		for _, s := range c.Inputs {
			key := [2]string{s.Source, s.Stream}
			if subs[key] == nil {
				order = append(order, key)
			}
			subs[key] = append(subs[key], sub{c.Name, s.Grouping.String()})
		}
	}
	var errs []error
	for _, key := range order {
		var direct, other *sub
		for i, s := range subs[key] {
			if s.grouping == GroupDirect.String() {
				direct = &subs[key][i]
			} else if other == nil {
				other = &subs[key][i]
			}
		}
		if direct != nil && other != nil {
			errs = append(errs, fmt.Errorf("stream %s/%s is subscribed with Direct grouping by %q and with %s grouping by %q; a stream is either direct (every subscriber uses Direct and the emitter calls EmitDirect) or not, so emit on two streams instead", key[0], key[1], direct.bolt, other.grouping, other.bolt))
		}
	}
	return errs
}

// cycle returns one cycle of the subscription graph, or nil.
func (b *Builder) cycle() []string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(name string) bool
	// edges: source -> subscriber
	next := map[string][]string{}
	for _, c := range b.components {
		for _, s := range c.Inputs {
			next[s.Source] = append(next[s.Source], c.Name)
		}
	}
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, m := range next[n] {
			switch color[m] {
			case grey:
				for i, s := range stack {
					if s == m {
						found = append(append([]string{}, stack[i:]...), m)
					}
				}
				return true
			case white:
				if visit(m) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	names := make([]string, 0, len(next))
	for n := range next {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return nil
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%q", xs)
}
