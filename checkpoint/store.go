package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Store holds checkpoint objects by name ("wordcount/epoch-00000000000000000012/task-3").
// Implementations are safe for concurrent use: the tasks of a checkpoint are
// written in parallel.
type Store interface {
	// Put stores data under name, replacing an object of that name. A reader
	// sees the whole object or none of it, also if the process dies during Put.
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the object, or an error wrapping ErrNotFound.
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the names that start with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the object; a missing object is not an error.
	Delete(ctx context.Context, name string) error
}

// ErrNotFound is wrapped by the error of a Get of a name no object has.
var ErrNotFound = errors.New("checkpoint: object not found")

// ErrInvalidName is wrapped by the error of a Store method given a name
// (or a List prefix) that CheckName (or CheckPrefix) refuses.
var ErrInvalidName = errors.New("checkpoint: invalid object name")

// CheckName returns nil if name is a valid object name: slash-separated
// segments of letters, digits, '.', '_' and '-', none of them empty, "." or
// "..". The rule is narrow so that a name is the same path in a directory
// on every system, a NATS object name, and a word in a shell command, and
// so that no name reaches outside a Dir's root. Stores outside this package
// call it too, so that every store refuses the same names.
func CheckName(name string) error {
	if name == "" {
		return invalidName(name, "it is empty")
	}
	for _, seg := range strings.Split(name, "/") {
		if why := badSegment(seg); why != "" {
			return invalidName(name, why)
		}
	}
	return nil
}

// CheckPrefix returns nil if prefix can start a valid name: "" (every
// name), a valid name, or a valid name followed by a slash or by the start
// of a further segment. Refusing the rest keeps a Dir's List inside its
// root.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// Completing the last segment with a letter turns every prefix of a
	// valid name into a valid name ("a/" into "a/x", "a/.." into "a/..x"),
	// and leaves every other prefix invalid ("a//" into "a//x").
	if CheckName(prefix+"x") != nil {
		return &kindError{
			msg:  fmt.Sprintf("checkpoint: list prefix %q cannot start a valid object name; use slash-separated segments of letters, digits, '.', '_' and '-'", prefix),
			errs: []error{ErrInvalidName},
		}
	}
	return nil
}

func badSegment(seg string) string {
	switch seg {
	case "":
		return "it has an empty segment"
	case ".", "..":
		return fmt.Sprintf("it has a %q segment", seg)
	}
	for _, c := range []byte(seg) {
		if !nameByte(c) {
			return fmt.Sprintf("%q is not allowed", c)
		}
	}
	return ""
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

func invalidName(name, why string) error {
	return &kindError{
		msg:  fmt.Sprintf("checkpoint: object name %q is not valid: %s; use slash-separated segments of letters, digits, '.', '_' and '-', none empty, '.' or '..'", name, why),
		errs: []error{ErrInvalidName},
	}
}

// notFound is the error of a Get of a missing object; where names the
// store ("directory /var/lib/ackflow", "bucket ackflow_ckpt_wordcount").
func notFound(name, where string, cause error) error {
	return newError(ErrNotFound, cause, "checkpoint: no object %s in %s", name, where)
}
