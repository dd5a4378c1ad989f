package topology

import "strings"

// GroupingKind says how a stream's records are spread over a bolt's tasks.
type GroupingKind uint8

const (
	GroupShuffle        GroupingKind = iota + 1 // round-robin over the tasks
	GroupFields                                 // by hash of the named fields: one key, one task
	GroupAll                                    // a copy to every task
	GroupGlobal                                 // everything to the lowest task
	GroupDirect                                 // the emitter names the task (EmitDirect)
	GroupLocalOrShuffle                         // a task in the same worker if there is one, else shuffle
)

func (k GroupingKind) String() string {
	switch k {
	case GroupShuffle:
		return "shuffle"
	case GroupFields:
		return "fields"
	case GroupAll:
		return "all"
	case GroupGlobal:
		return "global"
	case GroupDirect:
		return "direct"
	case GroupLocalOrShuffle:
		return "local-or-shuffle"
	}
	return "unknown"
}

// Grouping is a subscription's partitioning rule.
type Grouping struct {
	Kind   GroupingKind
	Fields []string // for GroupFields
}

func (g Grouping) String() string {
	if g.Kind == GroupFields {
		return "fields(" + strings.Join(g.Fields, ",") + ")"
	}
	return g.Kind.String()
}

// Shuffle spreads records evenly over the subscriber's tasks.
func Shuffle() Grouping { return Grouping{Kind: GroupShuffle} }

// Fields sends records with equal values of the named fields to the same task.
func Fields(names ...string) Grouping { return Grouping{Kind: GroupFields, Fields: names} }

// All sends a copy of every record to every task.
func All() Grouping { return Grouping{Kind: GroupAll} }

// Global sends every record to the subscriber's first task.
func Global() Grouping { return Grouping{Kind: GroupGlobal} }

// Direct lets the emitter choose the task with EmitDirect.
func Direct() Grouping { return Grouping{Kind: GroupDirect} }

// LocalOrShuffle prefers a task in the emitter's own worker, which skips NATS.
func LocalOrShuffle() Grouping { return Grouping{Kind: GroupLocalOrShuffle} }
