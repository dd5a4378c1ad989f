package sinks

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/ackflow/ackflow/topology"
)

// TabSeparated renders an input's values separated by tabs and ended by a
// newline, each with fmt's %v (a []byte prints as a list of numbers). It
// does not escape tabs or newlines inside values: use a Format of your own
// when values may hold them and the output is read line by line. It is the
// default Format of File and Stdout.
func TabSeparated(in *topology.Tuple) ([]byte, error) {
	var b []byte
	for i, v := range in.Values {
		if i > 0 {
			b = append(b, '\t')
		}
		b = appendValue(b, v)
	}
	return append(b, '\n'), nil
}

// appendValue is fmt's %v with the common cases spelled out, since a sink
// formats every record.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return append(b, x...)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	}
	return fmt.Appendf(b, "%v", v)
}

// JSONArray renders an input's values as one JSON array, as encoding/json
// does: strings as strings, numbers as numbers (a uint64 or int64 above
// 2^53 loses precision in readers that parse numbers as doubles), bool,
// nil as null, []byte as a base64 string, lists as arrays and maps as
// objects with sorted keys. A NaN or infinite float64 has no JSON form and
// is an error. It is the default Encode of JetStream.
func JSONArray(in *topology.Tuple) ([]byte, error) {
	b, err := json.Marshal([]any(in.Values))
	if err != nil {
		return nil, fmt.Errorf("sinks: encoding record %016x as JSON: %w; give the sink an Encode for such values", in.ID, err)
	}
	return b, nil
}
