package clustertest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ackflow/ackflow/cluster"
)

type registryOpener = func(t *testing.T) cluster.Registry

// RunRegistry runs every Registry case; open is called once per case and
// must return an empty Registry.
func RunRegistry(t *testing.T, open func(t *testing.T) cluster.Registry) {
	cases(t, open, []namedCase[registryOpener]{
		{"SubmitGetList", submitGetList},
		{"SubmitRefusesARunningName", submitRefusesRunning},
		{"UpdateIsCompareAndSet", updateCAS},
		{"ConcurrentUpdatesLoseNothing", concurrentUpdates},
		{"MissingIsNotFound", missingSpec},
		{"Delete", deleteSpecs},
		{"WatchSendsSpecsThenChanges", watchSpecs},
		{"InvalidSpecsRefused", invalidSpecs},
	})
}

func sampleSpec(name string) cluster.Spec {
	return cluster.Spec{
		Name:            name,
		Guarantee:       "exactly-once",
		Parallelism:     map[string]int{"split": 4, "count": 8},
		Settings:        map[string]string{"input": "/data/in.txt", "n": "0"},
		CheckpointEvery: 30 * time.Second,
		Resume:          true,
	}
}

func submit(t *testing.T, r cluster.Registry, spec cluster.Spec) {
	t.Helper()
	if err := r.Submit(context.Background(), spec); err != nil {
		t.Fatalf("Submit(%s): %v", spec.Name, err)
	}
}

func getSpec(t *testing.T, r cluster.Registry, name string) (cluster.Spec, uint64) {
	t.Helper()
	spec, rev, err := r.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return spec, rev
}

func update(t *testing.T, r cluster.Registry, spec cluster.Spec, rev uint64) uint64 {
	t.Helper()
	rev, err := r.Update(context.Background(), spec, rev)
	if err != nil {
		t.Fatalf("Update(%s): %v", spec.Name, err)
	}
	return rev
}

func listSpecs(t *testing.T, r cluster.Registry) []cluster.Spec {
	t.Helper()
	specs, err := r.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return specs
}

// sameSpec compares specs with Submitted as an instant.
func sameSpec(a, b cluster.Spec) bool {
	if !a.Submitted.Equal(b.Submitted) {
		return false
	}
	a.Submitted, b.Submitted = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func submitGetList(t *testing.T, open registryOpener) {
	r := open(t)
	before := time.Now()
	submit(t, r, sampleSpec("wordcount"))
	got, rev := getSpec(t, r, "wordcount")
	want := sampleSpec("wordcount")
	want.State, want.Submitted = cluster.StateRunning, got.Submitted
	if !sameSpec(got, want) || rev == 0 {
		t.Fatalf("Get = %+v at revision %d, want %+v, running, at a revision", got, rev, want)
	}
	if got.Submitted.Before(before.Add(-time.Second)) || got.Submitted.After(time.Now()) {
		t.Fatalf("Submitted = %v, want the time of Submit", got.Submitted)
	}
	stamped := sampleSpec("alpha")
	stamped.Submitted = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	submit(t, r, stamped)
	specs := listSpecs(t, r)
	if len(specs) != 2 || specs[0].Name != "alpha" || specs[1].Name != "wordcount" || !specs[0].Submitted.Equal(stamped.Submitted) {
		t.Fatalf("List = %+v, want alpha (with its own Submitted) then wordcount", specs)
	}
}

func submitRefusesRunning(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := context.Background()
	submit(t, r, sampleSpec("wc"))
	if err := r.Submit(ctx, sampleSpec("wc")); !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("Submit of a running name returned %v, want ErrExists", err)
	}
	spec, rev := getSpec(t, r, "wc")
	spec.State = cluster.StateKilling
	rev = update(t, r, spec, rev)
	if err := r.Submit(ctx, sampleSpec("wc")); !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("Submit of a name being killed returned %v, want ErrExists", err)
	}
	spec.State = cluster.StateFinishing
	rev = update(t, r, spec, rev)
	if err := r.Submit(ctx, sampleSpec("wc")); !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("Submit of a name being finished returned %v, want ErrExists", err)
	}
	spec.State = cluster.StateKilled
	update(t, r, spec, rev)
	again := sampleSpec("wc")
	again.Settings = map[string]string{"input": "/data/other.txt"}
	submit(t, r, again)
	got, rev := getSpec(t, r, "wc")
	if got.State != cluster.StateRunning || got.Settings["input"] != "/data/other.txt" {
		t.Fatalf("a submission over a killed topology reads back as %+v, want the new one, running", got)
	}
	got.State = cluster.StateFinished
	update(t, r, got, rev)
	submit(t, r, sampleSpec("wc"))
	got, rev = getSpec(t, r, "wc")
	if got.State != cluster.StateRunning || got.Settings["input"] != "/data/in.txt" {
		t.Fatalf("a submission over a finished topology reads back as %+v, want the new one, running", got)
	}
	got.State, got.Error = cluster.StateFailed, "the bolt cannot prepare"
	update(t, r, got, rev)
	submit(t, r, sampleSpec("wc"))
	if got, _ := getSpec(t, r, "wc"); got.State != cluster.StateRunning || got.Error != "" {
		t.Fatalf("a submission over a failed topology reads back as %+v, want the new one, running", got)
	}
	killed := sampleSpec("other")
	killed.State = cluster.StateKilled
	if err := r.Submit(ctx, killed); err == nil {
		t.Fatalf("Submit of a spec in state killed succeeded, want an error")
	}
}

func updateCAS(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := context.Background()
	submit(t, r, sampleSpec("wc"))
	spec, rev1 := getSpec(t, r, "wc")
	spec.Parallelism["count"] = 16
	rev2 := update(t, r, spec, rev1)
	if rev2 <= rev1 {
		t.Fatalf("Update returned revision %d after %d, want a larger one", rev2, rev1)
	}
	stale := spec
	stale.Settings = map[string]string{"lost": "update"}
	if _, err := r.Update(ctx, stale, rev1); !errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Update at a stale revision returned %v, want ErrConflict", err)
	}
	got, rev := getSpec(t, r, "wc")
	if rev != rev2 || got.Parallelism["count"] != 16 || got.Settings["lost"] != "" {
		t.Fatalf("after a refused Update, Get = %+v at %d, want the first update at %d", got, rev, rev2)
	}
	if _, err := r.Update(ctx, spec, 0); err == nil || errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Update at revision 0 returned %v, want an error that says to read first", err)
	}
}

// concurrentUpdates increments a counter in the settings from several
// goroutines, each reading and writing with compare-and-set until it wins:
// a store whose compare-and-set let two writers win would lose increments.
func concurrentUpdates(t *testing.T, open registryOpener) {
	const goroutines, each = 6, 5
	r := open(t)
	submit(t, r, sampleSpec("wc"))
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range each {
				if err := increment(r); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := getSpec(t, r, "wc")
	if got.Settings["n"] != strconv.Itoa(goroutines*each) {
		t.Fatalf("after %d increments the counter is %s", goroutines*each, got.Settings["n"])
	}
}

func increment(r cluster.Registry) error {
	ctx := context.Background()
	for {
		spec, rev, err := r.Get(ctx, "wc")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(spec.Settings["n"])
		spec.Settings["n"] = strconv.Itoa(n + 1)
		_, err = r.Update(ctx, spec, rev)
		if !errors.Is(err, cluster.ErrConflict) {
			return err
		}
	}
}

func missingSpec(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := context.Background()
	if _, _, err := r.Get(ctx, "nothing"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Get of a missing topology returned %v, want ErrNotFound", err)
	}
	submit(t, r, sampleSpec("wc"))
	spec, rev := getSpec(t, r, "wc")
	if err := r.Delete(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Update(ctx, spec, rev); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Update of a deleted topology returned %v, want ErrNotFound", err)
	}
	if got := listSpecs(t, r); len(got) != 0 {
		t.Fatalf("a refused Update left %+v", got)
	}
}

func deleteSpecs(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := context.Background()
	submit(t, r, sampleSpec("a"))
	submit(t, r, sampleSpec("b"))
	for range 2 { // a second Delete of the same name is not an error
		if err := r.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Delete(ctx, "never"); err != nil {
		t.Fatalf("Delete of a topology never submitted: %v", err)
	}
	if _, _, err := r.Get(ctx, "a"); !errors.Is(err, cluster.ErrNotFound) {
		t.Fatalf("Get after Delete returned %v, want ErrNotFound", err)
	}
	if specs := listSpecs(t, r); len(specs) != 1 || specs[0].Name != "b" {
		t.Fatalf("List after Delete(a) = %+v, want b only", specs)
	}
	submit(t, r, sampleSpec("a")) // a deleted name may be submitted again
}

func watchSpecs(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := background(t)
	submit(t, r, sampleSpec("a"))
	submit(t, r, sampleSpec("b"))
	submit(t, r, sampleSpec("gone"))
	if err := r.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	_, revA := getSpec(t, r, "a")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := r.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for range 2 {
		ev, _ := receive(t, ch, 5*time.Second, "an initial spec", func(cluster.SpecEvent) bool { return true })
		if ev.Deleted || ev.Rev == 0 {
			t.Fatalf("initial event %+v, want a spec at its revision", ev)
		}
		if ev.Spec.Name == "a" && ev.Rev != revA {
			t.Fatalf("the initial event of a has revision %d, Get says %d", ev.Rev, revA)
		}
		initial = append(initial, ev.Spec.Name)
	}
	if slices.Sort(initial); !slices.Equal(initial, []string{"a", "b"}) {
		t.Fatalf("the initial events are of %v, want a and b (not the deleted one)", initial)
	}
	spec, rev := getSpec(t, r, "a")
	spec.State = cluster.StateKilling
	rev = update(t, r, spec, rev)
	next := func(what string) cluster.SpecEvent {
		ev, _ := receive(t, ch, 5*time.Second, what, func(cluster.SpecEvent) bool { return true })
		return ev
	}
	if ev := next("the update of a"); ev.Spec.Name != "a" || ev.Spec.State != cluster.StateKilling || ev.Rev != rev || ev.Deleted {
		t.Fatalf("after an update of a the watch sent %+v", ev)
	}
	if err := r.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if ev := next("the deletion of b"); ev.Spec.Name != "b" || !ev.Deleted {
		t.Fatalf("after Delete(b) the watch sent %+v, want b deleted", ev)
	}
	submit(t, r, sampleSpec("c"))
	if ev := next("the submission of c"); ev.Spec.Name != "c" || ev.Deleted || ev.Spec.State != cluster.StateRunning {
		t.Fatalf("after Submit(c) the watch sent %+v", ev)
	}
	stop()
	closes(t, ch, 5*time.Second)
}

func invalidSpecs(t *testing.T, open registryOpener) {
	r := open(t)
	ctx := context.Background()
	bad := map[string]func(*cluster.Spec){
		"empty name":       func(s *cluster.Spec) { s.Name = "" },
		"dot in name":      func(s *cluster.Spec) { s.Name = "a.b" },
		"wildcard":         func(s *cluster.Spec) { s.Name = "a*" },
		"no guarantee":     func(s *cluster.Spec) { s.Guarantee = "" },
		"zero parallelism": func(s *cluster.Spec) { s.Parallelism = map[string]int{"count": 0} },
		"negative ckpt":    func(s *cluster.Spec) { s.CheckpointEvery = -time.Second },
		"unknown state":    func(s *cluster.Spec) { s.State = "paused" },
	}
	for what, change := range bad {
		spec := sampleSpec("wc")
		change(&spec)
		if err := r.Submit(ctx, spec); err == nil || !strings.HasPrefix(err.Error(), "cluster: ") {
			t.Errorf("Submit of a spec with %s returned %v, want a cluster: error", what, err)
		}
	}
	if specs := listSpecs(t, r); len(specs) != 0 {
		t.Fatalf("refused submissions stored %+v", specs)
	}
	submit(t, r, sampleSpec("wc"))
	spec, rev := getSpec(t, r, "wc")
	spec.State = "paused"
	if _, err := r.Update(ctx, spec, rev); err == nil || errors.Is(err, cluster.ErrConflict) {
		t.Fatalf("Update to an unknown state returned %v, want an error about the state", err)
	}
	for _, name := range []string{"", "a.b", "a b"} {
		if _, _, err := r.Get(ctx, name); err == nil || errors.Is(err, cluster.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want an error about the name", name, err)
		}
	}
}
