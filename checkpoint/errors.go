package checkpoint

import (
	"errors"
	"fmt"
	"strings"
)

// ErrCorrupt is wrapped by the errors of checkpoints that exist but cannot
// be restored: a manifest or a task object that is missing, truncated,
// corrupted or inconsistent. Latest skips such an epoch and restores an
// earlier one; it returns ErrCorrupt only when no epoch is usable.
var ErrCorrupt = errors.New("checkpoint: corrupt checkpoint")

// ErrNoCheckpoint is wrapped by the errors that say there is nothing to
// restore: no epoch of the topology at all, or none that was completed
// (every one lacks its manifest). A run that gets it starts from the
// beginning of its sources.
var ErrNoCheckpoint = errors.New("checkpoint: no checkpoint")

// ErrTopologyChanged is wrapped by Latest's error when the newest complete
// checkpoint was taken of a topology of another shape (another
// fingerprint). Latest does not fall back to an older epoch then: the
// change is deliberate, not damage, and going further back would silently
// undo what the changed topology did.
var ErrTopologyChanged = errors.New("checkpoint: the topology changed since its checkpoint")

// ErrRetention is wrapped by Commit's error when the manifest was written,
// so the epoch is complete and restorable, but deleting older epochs
// failed. The next Commit tries the deletion again.
var ErrRetention = errors.New("checkpoint: deleting old epochs failed")

// kindError reads as one sentence but wraps a sentinel and the cause it
// came from, so that errors.Is finds both without the text turning into a
// chain of "checkpoint: ...: checkpoint: ..." prefixes.
type kindError struct {
	msg  string
	errs []error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return e.errs }

// newError returns an error with the formatted text that wraps kind and,
// if it is not nil, cause. The text should already say what cause said.
func newError(kind, cause error, format string, args ...any) error {
	e := &kindError{msg: fmt.Sprintf(format, args...), errs: []error{kind}}
	if cause != nil {
		e.errs = append(e.errs, cause)
	}
	return e
}

// reasons lists errs one per line, indented under the sentence they
// explain.
func reasons(errs []error) string {
	var b strings.Builder
	for _, err := range errs {
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return b.String()
}
