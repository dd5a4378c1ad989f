package workers

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// LevelVar is a log level that can change while the loggers that use it
// live: the tasks of a topology keep the logger of their TaskContext for
// their whole life, so a new level cannot be a new logger. A logger with
// the LevelVar as a hook drops the events below its level; the logger's
// own level must be at or below the lowest level the LevelVar will take
// (Debug), so the events reach the hook. An event below the LevelVar's
// level is still built before it is dropped: cheap (zerolog pools its
// events), but not free, so nothing on the hot path logs per record.
type LevelVar struct{ v atomic.Int32 }

// NewLevelVar returns a LevelVar at level.
func NewLevelVar(level zerolog.Level) *LevelVar {
	l := &LevelVar{}
	l.Set(level)
	return l
}

// Set changes the level.
func (l *LevelVar) Set(level zerolog.Level) { l.v.Store(int32(level)) }

// Level is the current level.
func (l *LevelVar) Level() zerolog.Level { return zerolog.Level(l.v.Load()) }

// Run drops e unless its level is at or above l's; events without a
// level (Log) always pass.
func (l *LevelVar) Run(e *zerolog.Event, level zerolog.Level, _ string) {
	if level != zerolog.NoLevel && level < l.Level() {
		e.Discard()
	}
}

// Leveled returns log with its level held by l: at most Debug on the
// logger itself, and l's level applied by the hook.
func (l *LevelVar) Leveled(log zerolog.Logger) zerolog.Logger {
	return log.Level(min(log.GetLevel(), zerolog.DebugLevel)).Hook(l)
}

// ParseLevel reads a level name that the command line and ackflow
// loglevel accept: debug, info, warn or error.
func ParseLevel(s string) (zerolog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return zerolog.DebugLevel, nil
	case "info":
		return zerolog.InfoLevel, nil
	case "warn", "warning":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	}
	return zerolog.NoLevel, fmt.Errorf("log level %q: use debug, info, warn or error", s)
}
