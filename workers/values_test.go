package workers_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/embednats"
	"github.com/ackflow/ackflow/flowtest"
	"github.com/ackflow/ackflow/topology"
	"github.com/ackflow/ackflow/workers"
	"go.uber.org/goleak"
)

type custom struct{ A int }

// supported are values Emit accepts, and what every receiver gets.
var supported = []struct {
	name     string
	emit     func() any // a fresh value per emit: Emit normalises in place
	received any
}{
	{"int", func() any { return -7 }, int64(-7)},
	{"int8", func() any { return int8(-8) }, int64(-8)},
	{"int16", func() any { return int16(300) }, int64(300)},
	{"int32", func() any { return int32(-70000) }, int64(-70000)},
	{"int64", func() any { return int64(math.MinInt64) }, int64(math.MinInt64)},
	{"uint", func() any { return uint(7) }, uint64(7)},
	{"uint8", func() any { return uint8(255) }, uint64(255)},
	{"uint16", func() any { return uint16(65535) }, uint64(65535)},
	{"uint32", func() any { return uint32(math.MaxUint32) }, uint64(math.MaxUint32)},
	{"uint64", func() any { return uint64(math.MaxUint64) }, uint64(math.MaxUint64)},
	{"float32", func() any { return float32(0.5) }, 0.5},
	{"float64", func() any { return math.Inf(-1) }, math.Inf(-1)},
	{"string", func() any { return "héllo" }, "héllo"},
	{"empty string", func() any { return "" }, ""},
	{"bytes", func() any { return []byte{0, 1, 255} }, []byte{0, 1, 255}},
	{"nil bytes", func() any { return []byte(nil) }, []byte{}},
	{"bool", func() any { return true }, true},
	{"nil", func() any { return nil }, nil},
	{"list", func() any { return []any{1, "a", []byte("b"), nil} }, []any{int64(1), "a", []byte("b"), nil}},
	{"nil list", func() any { return []any(nil) }, []any{}},
	{"map", func() any { return map[string]any{"n": int32(2), "l": []any{uint8(1)}} }, map[string]any{"n": int64(2), "l": []any{uint64(1)}}},
	{"nil map", func() any { return map[string]any(nil) }, map[string]any{}},
	{"nested", func() any {
		return []any{map[string]any{"m": map[string]any{"x": []any{float32(1)}}}}
	}, []any{map[string]any{"m": map[string]any{"x": []any{1.0}}}}},
}

// unsupported are values Emit refuses, with what the error must say.
var unsupported = []struct {
	name  string
	value any
	want  string
}{
	{"struct", custom{1}, "workers_test.custom"},
	{"pointer", &custom{}, "*workers_test.custom"},
	{"typed slice", []string{"a"}, "[]string"},
	{"typed map", map[string]int{"a": 1}, "map[string]int"},
	{"int keys", map[int]any{1: "a"}, "map[int]interface {}"},
	{"complex", complex(1, 2), "complex128"},
	{"func", func() {}, "func()"},
	{"time", time.Unix(0, 0), "time.Time"},
	{"deep in a list", []any{1, []any{struct{}{}}}, "[1][0] is struct {}"},
	{"deep in a map", map[string]any{"k": []any{custom{}}}, `["k"][0] is workers_test.custom`},
	{"nested too deep", deepList(9), "nest more than 8 deep"},
}

func deepList(n int) any {
	var v any = int64(1)
	for i := 0; i < n; i++ {
		v = []any{v}
	}
	return v
}

// typesSpout emits {name, value} for every supported value and then every
// unsupported one, and keeps the errors Emit returns.
type typesSpout struct {
	out  topology.SpoutCollector
	done bool
	mu   *sync.Mutex
	errs map[string]error
}

func (s *typesSpout) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	s.out = out
	return nil
}

func (s *typesSpout) Next(context.Context) error {
	if s.done {
		return topology.ErrExhausted
	}
	s.done = true
	i := int64(0)
	for _, c := range supported {
		s.record(c.name, s.out.Emit(topology.MsgID{Offset: i}, topology.Values{c.name, c.emit()}))
		i++
	}
	for _, c := range unsupported {
		s.record(c.name, s.out.Emit(topology.MsgID{Offset: i}, topology.Values{c.name, c.value}))
		i++
	}
	return nil
}

func (s *typesSpout) record(name string, err error) {
	s.mu.Lock()
	s.errs[name] = err
	s.mu.Unlock()
}

func (s *typesSpout) Ack(topology.MsgID)  {}
func (s *typesSpout) Fail(topology.MsgID) {}
func (s *typesSpout) Close() error        { return nil }

// recorder keeps what it received by name, and the worker it ran in.
type recorder struct {
	out     topology.Collector
	mu      *sync.Mutex
	got     map[string]any
	workers map[string]int
	worker  int
}

func (r *recorder) Prepare(tc topology.TaskContext, out topology.Collector) error {
	r.out, r.worker = out, tc.Worker
	return nil
}

func (r *recorder) Execute(in *topology.Tuple) {
	name, _ := in.String(0)
	r.mu.Lock()
	r.got[name] = in.Value(1)
	r.workers[name] = r.worker
	r.mu.Unlock()
	r.out.Ack(in)
}

func (r *recorder) Cleanup() error { return nil }

// TestValueTypes sends every supported value type to a bolt in the
// spout's worker (handed over in memory) and to two in another worker
// (encoded over NATS, one of them decoding in place: ZeroCopyInputs): all
// must receive the same Go value. Every
// unsupported type must be refused at Emit with an error naming the
// component, stream, field and type, and be counted and dead-lettered, so
// that nothing is lost without a trace, in either guarantee.
func TestValueTypes(t *testing.T) {
	for _, g := range []workers.Guarantee{workers.AtLeastOnce, workers.AtMostOnce} {
		t.Run(g.String(), func(t *testing.T) {
			defer goleak.VerifyNone(t)
			var mu sync.Mutex
			errs := map[string]error{}
			local, remote, inPlace := map[string]any{}, map[string]any{}, map[string]any{}
			localWorker, remoteWorker, inPlaceWorker := map[string]int{}, map[string]int{}, map[string]int{}
			b := topology.NewBuilder("types")
			b.Spout("values", func() topology.Spout { return &typesSpout{mu: &mu, errs: errs} }, 1).Outputs("name", "value")
			// Placement is round-robin over 2 workers in declaration order:
			// values -> 0; local tasks -> 1, 0; remote and in-place tasks
			// -> 1, 0. Local-or-shuffle picks local's task in worker 0,
			// global the first task of remote and in-place, in worker 1.
			b.Bolt("local", func() topology.Bolt { return &recorder{mu: &mu, got: local, workers: localWorker} }, 2).
				Input("values", topology.LocalOrShuffle())
			b.Bolt("remote", func() topology.Bolt { return &recorder{mu: &mu, got: remote, workers: remoteWorker} }, 2).
				Input("values", topology.Global())
			b.Bolt("in-place", func() topology.Bolt { return &recorder{mu: &mu, got: inPlace, workers: inPlaceWorker} }, 2).
				Input("values", topology.Global()).ZeroCopyInputs()
			topo, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: g, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for name, w := range localWorker {
				if _, ok := inPlaceWorker[name]; !ok {
					continue // a name that did not arrive intact: the values below say so
				}
				if w != 0 || remoteWorker[name] == 0 || inPlaceWorker[name] == 0 {
					t.Fatalf("placement changed: %s reached local in worker %d, remote in worker %d, in-place in %d; the spout is in worker 0", name, w, remoteWorker[name], inPlaceWorker[name])
				}
			}
			for _, c := range supported {
				if errs[c.name] != nil {
					t.Errorf("%s: Emit refused it: %v", c.name, errs[c.name])
					continue
				}
				for where, got := range map[string]map[string]any{"in the same worker": local, "across NATS": remote, "across NATS, decoded in place": inPlace} {
					v, ok := got[c.name]
					if !ok || !reflect.DeepEqual(v, c.received) {
						t.Errorf("%s %s: received %#v (%T), want %#v (%T)", c.name, where, v, v, c.received, c.received)
					}
				}
			}
			for _, c := range unsupported {
				err := errs[c.name]
				if err == nil || !errors.Is(err, workers.ErrEmitRefused) {
					t.Errorf("%s: Emit accepted it (error %v)", c.name, err)
					continue
				}
				for _, part := range []string{"values (task 0)", `stream "default"`, `field "value"`, c.want} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("%s: error %q does not say %q", c.name, err, part)
					}
				}
				if _, ok := local[c.name]; ok {
					t.Errorf("%s: a refused record was delivered", c.name)
				}
			}
			spout := sum.Component("values")
			if spout.EmitErrors != int64(len(unsupported)) {
				t.Errorf("%d emit errors counted, want %d", spout.EmitErrors, len(unsupported))
			}
			if g == workers.AtLeastOnce && (spout.DeadLettered != int64(len(unsupported)) || len(sum.DeadLetters) != len(unsupported)) {
				t.Errorf("%d refused records dead-lettered (%d letters), want %d", spout.DeadLettered, len(sum.DeadLetters), len(unsupported))
			}
		})
	}
}

// emitsBadValue emits a value outside the value set for one input and
// acks it anyway: the runtime must fail the input instead, so the record
// is replayed and finally dead-lettered with the emit's error.
type emitsBadValue struct {
	out topology.Collector
	bad int64
}

func (e *emitsBadValue) Prepare(_ topology.TaskContext, out topology.Collector) error {
	e.out = out
	return nil
}

func (e *emitsBadValue) Execute(in *topology.Tuple) {
	n, _ := in.Int(0)
	var v any = n
	if n == e.bad {
		v = custom{}
	}
	_ = e.out.Emit(in, topology.Values{v}) // the error is ignored on purpose
	e.out.Ack(in)
}

func (e *emitsBadValue) Cleanup() error { return nil }

func TestIgnoredBoltEmitErrorFailsTheInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	const n, bad = 500, 77
	sink := flowtest.NewSink()
	topo := numbersTopology(t, "ignored", func() topology.Spout { return &numbers{n: n} },
		func() topology.Bolt { return &emitsBadValue{bad: bad} }, sink)
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) { c.MaxAttempts, c.ReplayBackoff = 3, time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	got := sinkCounts(sink)
	for i := int64(0); i < n; i++ {
		if want := 1; i == bad {
			want = 0
			if got[i] != want {
				t.Fatalf("the bad record reached the sink %d times", got[i])
			}
		} else if got[i] < want {
			t.Fatalf("record %d never reached the sink", i)
		}
	}
	if len(sum.DeadLetters) != 1 {
		t.Fatalf("%d dead letters, want 1: %+v", len(sum.DeadLetters), sum.DeadLetters)
	}
	l := sum.DeadLetters[0]
	if l.Offset != bad || l.Attempts != 3 || l.Component != "mid" || !strings.Contains(l.Error, "workers_test.custom") || !strings.Contains(l.Error, `stream "default"`) {
		t.Fatalf("dead letter %+v", l)
	}
	if c := sum.Component("mid"); c.EmitErrors != 3 {
		t.Fatalf("%d emit errors counted, want 3 (one per attempt)", c.EmitErrors)
	}
}

// TestRecordTooLargeForAFrameIsRefused runs against a server whose
// max_payload is 64 KiB: a larger record is refused at Emit with an error
// that says what to do, and dead-lettered; the others arrive.
func TestRecordTooLargeForAFrameIsRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := startServer(t, 64<<10)
	defer srv.Shutdown()
	var mu sync.Mutex
	errs := map[string]error{}
	big := &bigSpout{mu: &mu, errs: errs}
	sink := flowtest.NewSink()
	b := topology.NewBuilder("big")
	b.Spout("big", func() topology.Spout { return big }, 1).Outputs("payload")
	b.Bolt("sink", sink.Bolt, 1).Input("big", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{
		Guarantee: workers.AtLeastOnce,
		Configure: func(c *workers.Config) { c.NATSURL = srv.URL() },
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := errs["big"]; err == nil || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("a record larger than a frame: error %v", err)
	}
	for _, name := range []string{"small", "just fits"} {
		if errs[name] != nil {
			t.Fatalf("%s refused: %v", name, errs[name])
		}
	}
	if len(sink.Values()) != 2 || sum.DeadLettered != 1 {
		t.Fatalf("%d records arrived and %d were dead-lettered; want 2 and 1", len(sink.Values()), sum.DeadLettered)
	}
}

type bigSpout struct {
	out  topology.SpoutCollector
	done bool
	mu   *sync.Mutex
	errs map[string]error
}

func (s *bigSpout) Open(_ topology.TaskContext, out topology.SpoutCollector) error {
	s.out = out
	return nil
}

func (s *bigSpout) Next(context.Context) error {
	if s.done {
		return topology.ErrExhausted
	}
	s.done = true
	for i, c := range []struct {
		name string
		size int
	}{{"small", 10}, {"just fits", 50 << 10}, {"big", 100 << 10}} {
		err := s.out.Emit(topology.MsgID{Offset: int64(i)}, topology.Values{make([]byte, c.size)})
		s.mu.Lock()
		s.errs[c.name] = err
		s.mu.Unlock()
	}
	return nil
}

func (s *bigSpout) Ack(topology.MsgID)  {}
func (s *bigSpout) Fail(topology.MsgID) {}
func (s *bigSpout) Close() error        { return nil }

// directSpout emits to tasks by ID, some of which do not subscribe.
type directSpout struct {
	out   topology.SpoutCollector
	tasks []int
	done  bool
	errs  *[]error
}

func (s *directSpout) Open(tc topology.TaskContext, out topology.SpoutCollector) error {
	s.out, s.tasks = out, tc.TasksOf("target")
	return nil
}

func (s *directSpout) Next(context.Context) error {
	if s.done {
		return topology.ErrExhausted
	}
	s.done = true
	for i, task := range []int{s.tasks[0], s.tasks[1], 999, -1, 0} {
		*s.errs = append(*s.errs, s.out.EmitDirect(task, "direct", topology.MsgID{Offset: int64(i)}, topology.Values{int64(i)}))
	}
	*s.errs = append(*s.errs, s.out.EmitTo("direct", topology.MsgID{Offset: 10}, topology.Values{int64(10)}))
	*s.errs = append(*s.errs, s.out.EmitDirect(s.tasks[0], topology.DefaultStream, topology.MsgID{Offset: 11}, topology.Values{int64(11)}))
	return nil
}

func (s *directSpout) Ack(topology.MsgID)  {}
func (s *directSpout) Fail(topology.MsgID) {}
func (s *directSpout) Close() error        { return nil }

// TestDirectEmitsAreChecked: EmitDirect takes task IDs from
// TaskContext.TasksOf; a task that does not subscribe, a plain emit on a
// direct stream and a direct emit on a plain stream are refused, not
// treated as complete trees.
func TestDirectEmitsAreChecked(t *testing.T) {
	defer goleak.VerifyNone(t)
	var errs []error
	sink, other := flowtest.NewSink(), flowtest.NewSink()
	b := topology.NewBuilder("direct")
	b.Spout("numbers", func() topology.Spout { return &directSpout{errs: &errs} }, 1).Stream("direct", "n").Outputs("n")
	b.Bolt("target", sink.Bolt, 2).InputStream("numbers", "direct", topology.Direct())
	b.Bolt("plain", other.Bolt, 1).Input("numbers", topology.Shuffle())
	topo, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := flowtest.Run(context.Background(), topo, flowtest.Options{Guarantee: workers.AtLeastOnce})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "", "task 999 does not subscribe", "does not subscribe", "task 0 does not subscribe", "send with EmitDirect", "use Emit"}
	if len(errs) != len(want) {
		t.Fatalf("%d results", len(errs))
	}
	for i, w := range want {
		switch {
		case w == "" && errs[i] != nil:
			t.Errorf("emit %d: %v", i, errs[i])
		case w != "" && (errs[i] == nil || !strings.Contains(errs[i].Error(), w)):
			t.Errorf("emit %d: error %v, want one saying %q", i, errs[i], w)
		}
	}
	recs := sink.Records()
	if len(recs) != 2 || len(other.Records()) != 0 {
		t.Fatalf("target got %d records, plain %d; want 2 and 0", len(recs), len(other.Records()))
	}
	if sum.DeadLettered != 5 {
		t.Fatalf("%d refused records dead-lettered, want 5", sum.DeadLettered)
	}
}

// startServer starts an embedded NATS server; the test shuts it down
// (before goleak looks, so with a defer, not t.Cleanup).
func startServer(t *testing.T, maxPayload int32) *embednats.Server {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{NoJetStream: true, MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
