package cluster

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by the errors of reads of something that does not
// exist: a topology that was never submitted, a generation not yet written,
// a topology without a leader.
var ErrNotFound = errors.New("cluster: not found")

// ErrExists is wrapped by Registry.Submit's error when a topology of that
// name is running or being killed.
var ErrExists = errors.New("cluster: already exists")

// ErrConflict is wrapped by the error of a compare-and-set write that lost:
// the record changed since the revision the writer read. The writer reads
// it again and decides again.
var ErrConflict = errors.New("cluster: conflict")

// ErrInvalidEntry is wrapped by the error of a read that found an entry no
// ackflow program writes: garbage, an entry of another topology, a
// generation numbered 0. The read returns the entry's revision with it, so
// that a leader can write a valid entry over it by compare-and-set.
var ErrInvalidEntry = errors.New("cluster: invalid entry")

// ErrNameTaken is wrapped by Members.Join's error when a live member has
// that name, and is given to MembersConfig.OnLost when another worker took
// the name of a member whose entry had expired.
var ErrNameTaken = errors.New("cluster: member name taken")

// checkName refuses names that cannot be a KV key and a NATS subject token
// as they are: the rule of topology names (letters, digits, '-' and '_'), so
// that a name means the same thing in every bucket, subject and shell
// command. what says what the name is of ("member", "topology").
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("cluster: empty %s name; use letters, digits, '-' and '_'", what)
	}
	for _, c := range []byte(name) {
		if !nameByte(c) {
			return fmt.Errorf("cluster: %s name %q has %q; use letters, digits, '-' and '_'", what, name, c)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
