package topology

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// FuzzStateRestore feeds arbitrary bytes to State.Restore, which reads a
// stateful task's checkpoint. It must not panic; a refused snapshot leaves
// the state empty and says ErrStateSnapshot; an accepted one holds the
// same entries after another snapshot and restore.
func FuzzStateRestore(f *testing.F) {
	s := NewState(8)
	for i := 0; i < 40; i++ {
		s.Counters("counts").Add(fmt.Sprint(i%13), int64(i)-20)
		s.Map("last").Put(fmt.Sprint(i%7), []byte{byte(i)})
	}
	good := s.AppendSnapshot(nil)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(NewState(8).AppendSnapshot(nil))
	f.Add(NewState(16).AppendSnapshot(nil))
	f.Add([]byte{stateVersion, 8, kindCounters, 1, 'c', 1, 9, 1, 1, 'k', 2})
	f.Add([]byte{stateVersion, 8, 7, 1, 'c', 1, 0, 1, 1, 'k', 2})
	f.Add([]byte{stateVersion, 8, kindMap, 1, 'm', 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, snap []byte) {
		s := NewState(8)
		s.Counters("counts").Add("before", 1)
		if err := s.Restore(snap); err != nil {
			if !errors.Is(err, ErrStateSnapshot) {
				t.Fatalf("Restore refused with %v, which does not wrap ErrStateSnapshot", err)
			}
			if got := dump(s); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
			return
		}
		r := NewState(8)
		if err := r.Restore(s.AppendSnapshot(nil)); err != nil {
			t.Fatalf("the snapshot of a restored state is refused: %v", err)
		}
		if a, b := dump(s), dump(r); !reflect.DeepEqual(a, b) {
			t.Fatalf("snapshot and restore changed the state:\n%v\n%v", a, b)
		}
	})
}

// dump lists a state's entries: "counters/name/key" and "map/name/key".
func dump(s *State) map[string]string {
	out := map[string]string{}
	for name, c := range s.counters {
		c.Range(func(k string, n int64) bool {
			out["counters/"+name+"/"+k] = fmt.Sprint(n)
			return true
		})
	}
	for name, m := range s.maps {
		m.Range(func(k string, v []byte) bool {
			out["map/"+name+"/"+k] = string(v)
			return true
		})
	}
	return out
}
