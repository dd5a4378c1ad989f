package deadletter

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Unsupported stands in for a value whose Go type is outside the value set
// (a record the runtime refused at emit because of it). It keeps the type
// and the %v text, which is all a person needs to see what was sent; it
// is written back unchanged when a letter is stored again.
type Unsupported struct {
	GoType string // the value's %T
	Text   string // the value's %v
}

// maxDepth bounds how deeply lists and maps nest in a stored value. It is
// far above what the runtime lets through, so that a record refused for
// nesting too deeply is still stored; the bound only stops a cyclic value
// (a list that contains itself) from recursing forever.
const maxDepth = 64

// taggedValue is one value as JSON: {"type":..., "value":...}. Value is
// omitted only for nil; a nil slice or map is written as "value":null so
// that it reads back nil rather than empty.
type taggedValue struct {
	Type   string `json:"type"`
	GoType string `json:"go_type,omitempty"`
	// Encoding is "base64" for a string, or the keys of a map, that is not
	// valid UTF-8: JSON would replace its bad bytes with U+FFFD.
	Encoding string `json:"encoding,omitempty"`
	Value    any    `json:"value,omitempty"`
}

const base64Encoding = "base64"

var jsonNull = json.RawMessage("null")

func encodeValues(vs []any) []taggedValue {
	if vs == nil {
		return nil
	}
	out := make([]taggedValue, len(vs))
	for i, v := range vs {
		out[i] = encodeValue(v, 0)
	}
	return out
}

func encodeValue(v any, depth int) taggedValue {
	switch x := v.(type) {
	case nil:
		return taggedValue{Type: "nil"}
	case bool:
		return taggedValue{Type: "bool", Value: x}
	case int64:
		return taggedValue{Type: "int64", Value: strconv.FormatInt(x, 10)}
	case uint64:
		return taggedValue{Type: "uint64", Value: strconv.FormatUint(x, 10)}
	case float64:
		return taggedValue{Type: "float64", Value: encodeFloat(x)}
	case string:
		if !utf8.ValidString(x) {
			return taggedValue{Type: "string", Encoding: base64Encoding, Value: base64.StdEncoding.EncodeToString([]byte(x))}
		}
		return taggedValue{Type: "string", Value: x}
	case []byte:
		if x == nil {
			return taggedValue{Type: "bytes", Value: jsonNull}
		}
		return taggedValue{Type: "bytes", Value: base64.StdEncoding.EncodeToString(x)}
	case []any:
		return encodeList(x, depth)
	case map[string]any:
		return encodeMap(x, depth)
	case Unsupported:
		return taggedValue{Type: "unsupported", GoType: x.GoType, Value: x.Text}
	}
	return taggedValue{Type: "unsupported", GoType: fmt.Sprintf("%T", v), Value: fmt.Sprintf("%v", v)}
}

// encodeFloat writes the three values JSON numbers cannot hold as strings.
func encodeFloat(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return f
}

func encodeList(x []any, depth int) taggedValue {
	if depth >= maxDepth {
		return tooDeep(x)
	}
	if x == nil {
		return taggedValue{Type: "list", Value: jsonNull}
	}
	out := make([]taggedValue, len(x))
	for i, e := range x {
		out[i] = encodeValue(e, depth+1)
	}
	return taggedValue{Type: "list", Value: out}
}

func encodeMap(x map[string]any, depth int) taggedValue {
	if depth >= maxDepth {
		return tooDeep(x)
	}
	if x == nil {
		return taggedValue{Type: "map", Value: jsonNull}
	}
	encoding := ""
	for k := range x {
		if !utf8.ValidString(k) {
			encoding = base64Encoding
		}
	}
	out := make(map[string]taggedValue, len(x))
	for k, e := range x {
		if encoding == base64Encoding {
			k = base64.StdEncoding.EncodeToString([]byte(k))
		}
		out[k] = encodeValue(e, depth+1)
	}
	return taggedValue{Type: "map", Encoding: encoding, Value: out}
}

// tooDeep records a value nested beyond maxDepth without printing it: %v of
// a cyclic value would not return either.
func tooDeep(v any) taggedValue {
	return taggedValue{Type: "unsupported", GoType: fmt.Sprintf("%T", v),
		Value: fmt.Sprintf("(nested more than %d deep; not stored)", maxDepth)}
}

// rawValue is a taggedValue as read, before its type is known.
type rawValue struct {
	Type     string          `json:"type"`
	GoType   string          `json:"go_type"`
	Encoding string          `json:"encoding"`
	Value    json.RawMessage `json:"value"`
}

func decodeValues(raws []json.RawMessage) ([]any, error) {
	if raws == nil {
		return nil, nil
	}
	out := make([]any, len(raws))
	for i, raw := range raws {
		v, err := decodeValue(raw, 0)
		if err != nil {
			return nil, fmt.Errorf("value %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

func decodeValue(raw json.RawMessage, depth int) (any, error) {
	var r rawValue
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	switch r.Type {
	case "nil":
		return nil, nil
	case "bool":
		return decodeScalar[bool](r)
	case "int64":
		return decodeInt(r, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
	case "uint64":
		return decodeInt(r, func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) })
	case "float64":
		return decodeFloat(r)
	case "string":
		return decodeString(r)
	case "bytes":
		return decodeBytes(r)
	case "list":
		return decodeList(r, depth)
	case "map":
		return decodeMap(r, depth)
	case "unsupported":
		text, err := decodeScalar[string](r)
		return Unsupported{GoType: r.GoType, Text: text}, err
	case "":
		return nil, errors.New(`value has no "type" tag`)
	}
	return nil, fmt.Errorf("unknown value type %q (known: nil, bool, int64, uint64, float64, string, bytes, list, map, unsupported); was it written by a newer ackflow?", r.Type)
}

// isNull reports a missing or null "value"; only nil, bytes, list and map
// may be null, as a nil slice or map.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func decodeScalar[T any](r rawValue) (T, error) {
	var v T
	if isNull(r.Value) {
		return v, fmt.Errorf("%s value is missing", r.Type)
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return v, fmt.Errorf("%s value: %w", r.Type, err)
	}
	return v, nil
}

func decodeInt[T int64 | uint64](r rawValue, parse func(string) (T, error)) (any, error) {
	s, err := decodeScalar[string](r)
	if err != nil {
		return nil, err
	}
	n, err := parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s value: %w", r.Type, err)
	}
	return n, nil
}

func decodeFloat(r rawValue) (any, error) {
	if len(r.Value) == 0 || r.Value[0] != '"' {
		return decodeScalar[float64](r)
	}
	s, err := decodeScalar[string](r)
	if err != nil {
		return nil, err
	}
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return nil, fmt.Errorf(`float64 value %q: want a number, "NaN", "+Inf" or "-Inf"`, s)
}

func decodeString(r rawValue) (any, error) {
	s, err := decodeScalar[string](r)
	if err != nil {
		return nil, err
	}
	return decodeText(r, s)
}

// decodeText undoes the encoding of a string or a map key.
func decodeText(r rawValue, s string) (string, error) {
	switch r.Encoding {
	case "":
		return s, nil
	case base64Encoding:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("%s value: %w", r.Type, err)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("%s value has unknown encoding %q (known: base64)", r.Type, r.Encoding)
}

func decodeBytes(r rawValue) (any, error) {
	if isNull(r.Value) {
		return []byte(nil), nil
	}
	s, err := decodeScalar[string](r)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("bytes value: %w", err)
	}
	return b, nil
}

func decodeList(r rawValue, depth int) (any, error) {
	if isNull(r.Value) {
		return []any(nil), nil
	}
	if depth >= maxDepth {
		return nil, fmt.Errorf("list nested more than %d deep", maxDepth)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(r.Value, &raws); err != nil {
		return nil, fmt.Errorf("list value: %w", err)
	}
	out := make([]any, len(raws))
	for i, raw := range raws {
		v, err := decodeValue(raw, depth+1)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

func decodeMap(r rawValue, depth int) (any, error) {
	if isNull(r.Value) {
		return map[string]any(nil), nil
	}
	if depth >= maxDepth {
		return nil, fmt.Errorf("map nested more than %d deep", maxDepth)
	}
	var raws map[string]json.RawMessage
	if err := json.Unmarshal(r.Value, &raws); err != nil {
		return nil, fmt.Errorf("map value: %w", err)
	}
	out := make(map[string]any, len(raws))
	for k, raw := range raws {
		key, err := decodeText(r, k)
		if err != nil {
			return nil, err
		}
		v, err := decodeValue(raw, depth+1)
		if err != nil {
			return nil, fmt.Errorf("[%q]: %w", key, err)
		}
		out[key] = v
	}
	return out, nil
}
