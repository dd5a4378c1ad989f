package deadletter

import (
	"encoding/json"
	"fmt"
	"time"
)

// Letter is one dead-lettered root record: where it came from, why it was
// given up, and its values, so that it can be found and re-injected.
type Letter struct {
	Topology  string `json:"topology"`
	Spout     string `json:"spout"`      // spout component
	SpoutTask int    `json:"spout_task"` // task index of the spout
	Stream    string `json:"stream"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"` // with Partition, the spout's message ID: the source position
	// RecordID is a string in JSON: JSON numbers lose precision above 2^53
	// in most readers, and record IDs are hashes that use all 64 bits.
	RecordID  uint64    `json:"record_id,string"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error"`     // the last failure's reason
	Component string    `json:"component"` // component that failed it last; "" when unknown (a timeout)
	Task      int       `json:"task"`      // task that failed it last; -1 when unknown
	Values    []any     `json:"values"`    // see the value set on MarshalJSON
	Time      time.Time `json:"time"`      // when it was dead-lettered
}

// plainLetter has Letter's fields without its methods, so that the JSON
// methods can reuse the struct tags and replace only Values.
type plainLetter Letter

// MarshalJSON writes every value as a tagged object so that it reads back
// with its exact Go type. The value set is nil, bool, int64, uint64, float64
// (NaN and ±Inf too), string, []byte, and []any and map[string]any of these;
// a value of any other type is stored as an Unsupported with its type and
// its %v text. Letters that fail to encode are only those whose Time is
// outside years 0-9999.
func (l Letter) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		plainLetter
		Values []taggedValue `json:"values"`
	}{plainLetter(l), encodeValues(l.Values)})
}

// UnmarshalJSON reads what MarshalJSON wrote. A value with an unknown type
// tag is an error rather than a guess: a re-injected record must be the
// record that failed.
func (l *Letter) UnmarshalJSON(b []byte) error {
	var aux struct {
		plainLetter
		Values []json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	values, err := decodeValues(aux.Values)
	if err != nil {
		return err
	}
	*l = Letter(aux.plainLetter)
	l.Values = values
	return nil
}

// encode is a letter's JSON with the error a sink returns when it fails.
func encode(l Letter) ([]byte, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return nil, fmt.Errorf("deadletter: cannot encode the letter of record %016x: %w", l.RecordID, err)
	}
	return b, nil
}
