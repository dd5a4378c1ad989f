package topology

import (
	"fmt"

	"github.com/ackflow/ackflow/wire"
)

// Tuple is one record delivered to a bolt. The runtime owns it: a bolt may
// keep it until it acks or fails it, and must not change its Values.
type Tuple struct {
	ID        uint64 // deterministic record ID (the same in every replay)
	Component string // component that emitted it
	Stream    string // stream it was emitted on
	Task      int    // task that emitted it
	Values    Values
	Schema    *Schema // names of Values, from the emitting stream's declaration

	track Tracking
}

// Tracking is the runtime's acking state of a tuple. It is exported for
// package workers; topologies never need it.
type Tracking struct {
	Anchors []wire.Anchor // trees this tuple belongs to, with its edge values
	AckVal  uint64        // XOR of the edges of the children anchored to it so far
	Emitted int           // outputs emitted while processing it (k in the child ID hash)
	Done    bool          // acked or failed already
	// EmitErr is the first error of an emit anchored to this tuple: the
	// runtime then fails the tuple even if the bolt acks it, so that the
	// output that could not be sent is not lost without a trace.
	EmitErr error
	// Carrier is the anchor of this tuple's latest child in its only tree,
	// which was still in the emitting task's outbox at CarrierIdx of the
	// batch for task CarrierDst when emitted. An ack while it still waits
	// there rides on it instead of going to the acker (workers, boltExec.Ack).
	Carrier                *wire.Anchor
	CarrierDst, CarrierIdx int32
}

// Tracking returns the runtime's bookkeeping for t. For package workers only.
func (t *Tuple) Tracking() *Tracking { return &t.track }

// Len is the number of values.
func (t *Tuple) Len() int { return len(t.Values) }

// Value returns value i, or nil when i is out of range.
func (t *Tuple) Value(i int) any {
	if i < 0 || i >= len(t.Values) {
		return nil
	}
	return t.Values[i]
}

// ValueByField returns the value of the named field, or nil when the stream
// has no such field.
func (t *Tuple) ValueByField(name string) any { return t.Value(t.Schema.Index(name)) }

// String returns value i as a string; it fails when the value is another type.
func (t *Tuple) String(i int) (string, error) {
	v, ok := t.Value(i).(string)
	if !ok {
		return "", typeError(t.describe(i), "a string", t.Value(i))
	}
	return v, nil
}

// StringByField is String for a named field.
func (t *Tuple) StringByField(name string) (string, error) { return t.String(t.Schema.Index(name)) }

// Int returns value i as an int64 (Emit turns every signed integer type
// into int64).
func (t *Tuple) Int(i int) (int64, error) {
	v, ok := t.Value(i).(int64)
	if !ok {
		return 0, typeError(t.describe(i), "an int64", t.Value(i))
	}
	return v, nil
}

// IntByField is Int for a named field.
func (t *Tuple) IntByField(name string) (int64, error) { return t.Int(t.Schema.Index(name)) }

// Uint returns value i as a uint64 (Emit turns every unsigned integer type
// into uint64).
func (t *Tuple) Uint(i int) (uint64, error) {
	v, ok := t.Value(i).(uint64)
	if !ok {
		return 0, typeError(t.describe(i), "a uint64", t.Value(i))
	}
	return v, nil
}

// Float returns value i as a float64.
func (t *Tuple) Float(i int) (float64, error) {
	v, ok := t.Value(i).(float64)
	if !ok {
		return 0, typeError(t.describe(i), "a float64", t.Value(i))
	}
	return v, nil
}

// Bool returns value i as a bool.
func (t *Tuple) Bool(i int) (bool, error) {
	v, ok := t.Value(i).(bool)
	if !ok {
		return false, typeError(t.describe(i), "a bool", t.Value(i))
	}
	return v, nil
}

// Bytes returns value i as a []byte.
func (t *Tuple) Bytes(i int) ([]byte, error) {
	v, ok := t.Value(i).([]byte)
	if !ok {
		return nil, typeError(t.describe(i), "a []byte", t.Value(i))
	}
	return v, nil
}

// List returns value i as a nested list.
func (t *Tuple) List(i int) ([]any, error) {
	v, ok := t.Value(i).([]any)
	if !ok {
		return nil, typeError(t.describe(i), "a list", t.Value(i))
	}
	return v, nil
}

// Map returns value i as a map.
func (t *Tuple) Map(i int) (map[string]any, error) {
	v, ok := t.Value(i).(map[string]any)
	if !ok {
		return nil, typeError(t.describe(i), "a map[string]any", t.Value(i))
	}
	return v, nil
}

func (t *Tuple) describe(i int) string {
	name := fmt.Sprint(i)
	if t.Schema != nil && i >= 0 && i < t.Schema.Len() {
		name = fmt.Sprintf("%d (%q)", i, t.Schema.names[i])
	}
	if i < 0 || i >= len(t.Values) {
		return fmt.Sprintf("field %s of %s/%s (out of range: the tuple has %d values)", name, t.Component, t.Stream, len(t.Values))
	}
	return fmt.Sprintf("field %s of %s/%s", name, t.Component, t.Stream)
}
