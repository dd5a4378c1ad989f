package topology

import "fmt"

// Values are the fields of one record, in the order the emitting stream
// declared them. Allowed element types: string, []byte, int64 (int and int32
// are widened), float64, bool, nil, and []any of these.
type Values []any

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
