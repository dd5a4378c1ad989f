package topology

import (
	"fmt"
	"strconv"

	"github.com/ackflow/ackflow/internal/strbox"
	"github.com/ackflow/ackflow/wire"
)

// Values are the fields of one record, in the order the emitting stream
// declared them.
//
// The value set is closed, so that a record reads the same whether its
// receiver is in the emitter's worker or across NATS:
//
//	nil, bool, int64, uint64, float64, string, []byte,
//	[]any and map[string]any of these (nested at most wire.MaxDepth deep)
//
// Emit normalises in place, inside lists and maps too: int, int8, int16 and
// int32 become int64; uint, uint8, uint16 and uint32 become uint64; float32
// becomes float64; a nil []byte, []any or map[string]any becomes an empty
// one. Any other type (a struct, a pointer, a []string...) is refused by
// Emit with a *ValueError, before anything is sent. Values given to Emit
// belong to the runtime afterwards: do not change them.
type Values []any

// StringValues returns Values holding the strings of ss, in order, with
// one allocation (the Values) where converting each string to a value
// allocates once per string: each value refers to its string's header in
// ss. ss must not change while the Values are in use, and the Values keep
// ss alive. A bolt that splits its input into fields emits them this way,
// as a record of all of them or, with the full slice expression
// vs[i:i+1:i+1], one record per field (examples/wordcount).
func StringValues(ss []string) Values {
	vs := make(Values, len(ss))
	for i := range ss {
		vs[i] = strbox.Ref(&ss[i])
	}
	return vs
}

// ValueError says which value of an emit is outside the value set.
type ValueError struct {
	Field int    // index of the top-level value
	Name  string // its field name, if the caller knows the schema
	Path  string // where inside a list or map, e.g. `[2]["k"]`; empty for the value itself
	Type  string // the Go type found
	Why   string // what is wrong
}

func (e *ValueError) Error() string {
	where := "value " + strconv.Itoa(e.Field)
	if e.Name != "" {
		where = fmt.Sprintf("field %q", e.Name)
	}
	return fmt.Sprintf("%s%s is %s: %s", where, e.Path, e.Type, e.Why)
}

const unsupported = "not in the value set; use nil, bool, int64, uint64, float64, string, []byte, []any or map[string]any (documented on topology.Values)"

// NormalizeValues brings vs into the value set in place (see Values) and
// returns the number of bytes the values take in a frame. It returns a
// *ValueError for the first value outside the set. Values already in the
// set are only read, so normalising a record that is being read elsewhere
// is safe.
func NormalizeValues(vs Values) (int, error) {
	size := 0
	for i := range vs {
		n, _, err := normalize(&vs[i], 0)
		if err != nil {
			err.Field = i
			return 0, err
		}
		size += n
	}
	return size, nil
}

// normalize converts *v to its canonical type and returns its encoded size
// and whether it stored a new value in *v.
func normalize(v *any, depth int) (int, bool, *ValueError) {
	switch x := (*v).(type) {
	case string:
		return 1 + uvarintLen(uint64(len(x))) + len(x), false, nil
	case int64:
		return 1 + varintLen(x), false, nil
	case float64:
		return 9, false, nil
	case bool, nil:
		return 1, false, nil
	case []byte:
		if x == nil {
			*v = []byte{}
			return 2, true, nil
		}
		return 1 + uvarintLen(uint64(len(x))) + len(x), false, nil
	case uint64:
		return 1 + uvarintLen(x), false, nil
	case int:
		*v = int64(x)
	case int32:
		*v = int64(x)
	case int16:
		*v = int64(x)
	case int8:
		*v = int64(x)
	case uint:
		*v = uint64(x)
	case uint32:
		*v = uint64(x)
	case uint16:
		*v = uint64(x)
	case uint8:
		*v = uint64(x)
	case float32:
		*v = float64(x)
	case []any:
		return normalizeList(v, x, depth)
	case map[string]any:
		return normalizeMap(v, x, depth)
	default:
		return 0, false, &ValueError{Type: fmt.Sprintf("%T", x), Why: unsupported}
	}
	n, _, err := normalize(v, depth) // a widened number: now canonical
	return n, true, err
}

func normalizeList(v *any, x []any, depth int) (int, bool, *ValueError) {
	if depth >= wire.MaxDepth {
		return 0, false, &ValueError{Type: "[]any", Why: fmt.Sprintf("lists and maps nest more than %d deep; flatten the value", wire.MaxDepth)}
	}
	replaced := false
	if x == nil {
		*v, replaced = []any{}, true
	}
	size := 1 + uvarintLen(uint64(len(x)))
	for i := range x {
		n, _, err := normalize(&x[i], depth+1)
		if err != nil {
			err.Path = "[" + strconv.Itoa(i) + "]" + err.Path
			return 0, false, err
		}
		size += n
	}
	return size, replaced, nil
}

func normalizeMap(v *any, x map[string]any, depth int) (int, bool, *ValueError) {
	if depth >= wire.MaxDepth {
		return 0, false, &ValueError{Type: "map[string]any", Why: fmt.Sprintf("lists and maps nest more than %d deep; flatten the value", wire.MaxDepth)}
	}
	replaced := false
	if x == nil {
		*v, replaced = map[string]any{}, true
	}
	size := 1 + uvarintLen(uint64(len(x)))
	for k, e := range x {
		n, changed, err := normalize(&e, depth+1)
		if err != nil {
			err.Path = "[" + strconv.Quote(k) + "]" + err.Path
			return 0, false, err
		}
		if changed {
			x[k] = e // replacing an existing key during range is allowed
		}
		size += uvarintLen(uint64(len(k))) + len(k) + n
	}
	return size, replaced, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	u := uint64(x) << 1
	if x < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// Schema names the values of a stream.
type Schema struct {
	names []string
	index map[string]int
}

// NewSchema makes a field list; names must be unique (the builder checks).
func NewSchema(names ...string) *Schema {
	f := &Schema{names: names, index: make(map[string]int, len(names))}
	for i, n := range names {
		f.index[n] = i
	}
	return f
}

// Names returns the field names in order.
func (f *Schema) Names() []string { return f.names }

// Index returns the position of a field, or -1.
func (f *Schema) Index(name string) int {
	if f == nil {
		return -1
	}
	if i, ok := f.index[name]; ok {
		return i
	}
	return -1
}

// Len is the number of fields.
func (f *Schema) Len() int { return len(f.names) }

func typeError(what string, want string, v any) error {
	return fmt.Errorf("topology: %s is %T, not %s", what, v, want)
}
