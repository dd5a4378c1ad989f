package workers

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// figures collects what the member runs and the leaders of a local run's
// in-process cluster did, across every generation and every node, so
// that the run ends with one Summary. A member's figures are taken when
// it ends (its tasks have stopped, so they are final); until then they
// are read live, for Progress. The nodes' runtime configuration carries
// it to every member and leader they start; a worker process of a real
// cluster has none.
type figures struct {
	mu      sync.Mutex
	live    map[*Member]bool
	leaders map[*Leader]bool
	parts   []partial
	ckpts   []ckptPart
	// rollbacks counts the generations a leader started after a loss, with
	// checkpoints (every task restored the latest); recoveries are the
	// failovers the leaders timed, from noticing the loss until the lost
	// tasks ran again.
	rollbacks  int
	recoveries []span
}

func newFigures() *figures {
	return &figures{live: map[*Member]bool{}, leaders: map[*Leader]bool{}}
}

// partial is one member run's figures, final.
type partial struct {
	gen  uint64
	sum  *Summary              // no dead letters, duration or rate
	lat  map[string]*histogram // complete latency by spout
	rec  map[int64]span
	plan *plan
	// inFlight is what its tasks sent less what they processed or dropped
	// (from any member): negative for a member that mostly receives.
	inFlight int64
	// comps are its figures per component as the status page shows them
	// (no gauges: they ended with it).
	comps []ComponentStatus
}

// ckptPart is one leader's checkpoints.
type ckptPart struct {
	gen     uint64
	sum     CheckpointSummary
	pauses  []time.Duration
	restore uint64
	// badFrames are the checkpoint replies that did not decode.
	badFrames int64
}

func (f *figures) joined(m *Member) {
	f.mu.Lock()
	f.live[m] = true
	f.mu.Unlock()
}

// ended takes the figures of m, whose tasks have stopped.
func (f *figures) ended(m *Member) {
	p := m.r.partial()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live[m] {
		delete(f.live, m)
		f.parts = append(f.parts, p)
	}
}

// running is how many members have not ended.
func (f *figures) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

func (f *figures) led(l *Leader) {
	f.mu.Lock()
	f.leaders[l] = true
	f.mu.Unlock()
}

// unled takes the checkpoint figures of l, which no longer leads.
func (f *figures) unled(l *Leader) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leaders[l] {
		return
	}
	delete(f.leaders, l)
	if l.coord == nil {
		return
	}
	f.ckpts = append(f.ckpts, ckptPart{gen: l.g.Number, sum: l.Checkpoints(), pauses: l.coord.pauseList(), restore: l.g.RestoreFrom,
		badFrames: l.r.tc.badFrames.Load()})
}

func (f *figures) rolledBack() {
	f.mu.Lock()
	f.rollbacks++
	f.mu.Unlock()
}

func (f *figures) recovered(s span) {
	f.mu.Lock()
	f.recoveries = append(f.recoveries, s)
	f.mu.Unlock()
}

// progress adds up the figures so far: the ended members' and the live
// ones'.
func (f *figures) progress() Progress {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p Progress
	for _, part := range f.parts {
		for _, c := range part.sum.Components {
			p.Records += c.Emitted
			p.Replayed += c.Replayed
			p.DeadLettered += c.DeadLettered
		}
	}
	for m := range f.live {
		r := m.r
		replayed, dead := r.replays()
		p.Records += r.records()
		p.Replayed += replayed
		p.DeadLettered += dead
		p.Pending += r.pendingTrees()
		p.InFlight += max(0, r.inFlight())
	}
	return p
}

// components adds up the figures per component so far, the ended
// members' and the live ones', in the topology's order, as the status
// page of a local run shows them.
func (f *figures) components() []ComponentStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p *plan
	byName := map[string]*ComponentStatus{}
	add := func(cs []ComponentStatus) {
		for _, c := range cs {
			if dst := byName[c.Component]; dst != nil {
				dst.add(c)
			} else {
				c.Latency = c.Latency.clone()
				byName[c.Component] = &c
			}
		}
	}
	for _, part := range f.parts {
		add(part.comps)
		p = part.plan
	}
	for m := range f.live {
		add(m.r.componentStatus(m.r.allTasks()))
		p = m.r.plan
	}
	if p == nil {
		return nil
	}
	var out []ComponentStatus
	for _, c := range p.topo.Components {
		if cs := byName[c.Name]; cs != nil {
			cs.Tasks = len(p.compTasks[c.Name])
			out = append(out, *cs)
		}
	}
	return out
}

// summary merges every member's and leader's figures; the caller sets
// the duration, the crashes and the dead letters. The records
// unaccounted for are the records sent less those processed or dropped,
// over every member (those sent to a member that crashed included); the
// output log entries still held are the last generation's. Recoveries
// are per crash (crashes, in order; recoveriesOf).
func (f *figures) summary(crashes []time.Time) *Summary {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &Summary{}
	var last *partial
	for i := range f.parts {
		if p := &f.parts[i]; last == nil || p.gen >= last.gen {
			last = p
		}
	}
	if last == nil {
		return s
	}
	s.Topology, s.Guarantee, s.Workers, s.Placement = last.sum.Topology, last.sum.Guarantee, last.plan.workers, last.plan.describe()
	comps := map[string]*ComponentSummary{}
	lats := map[string]*histogram{}
	var order []string
	for _, c := range last.plan.topo.Components {
		order = append(order, c.Name)
		comps[c.Name] = &ComponentSummary{Name: c.Name, Spout: c.IsSpout(), Tasks: len(last.plan.compTasks[c.Name])}
		lats[c.Name] = &histogram{}
	}
	failovers := map[int64]span{}
	var inFlight int64
	for _, p := range f.parts {
		s.addCounts(p.sum)
		s.noteTimes(p.sum.firstRoot, p.sum.lastTree)
		inFlight += p.inFlight
		if p.gen == last.gen {
			s.LogEntries += p.sum.LogEntries
		}
		for _, c := range p.sum.Components {
			if dst := comps[c.Name]; dst != nil {
				dst.add(c)
			}
		}
		for name, h := range p.lat {
			if dst := lats[name]; dst != nil {
				dst.add(h)
			}
		}
		for id, sp := range p.rec {
			if old, ok := failovers[id]; !ok || sp.done.After(old.done) {
				failovers[id] = sp
			}
		}
	}
	s.Unaccounted = max(0, inFlight)
	for _, name := range order {
		c := comps[name]
		h := lats[name]
		c.LatencyP50, c.LatencyP99, c.LatencyP999 = h.quantile(0.5), h.quantile(0.99), h.quantile(0.999)
		if c.Spout {
			s.SourceRecords += c.Emitted
		}
		s.Records += c.Emitted + c.Replayed
		s.DeadLettered += c.DeadLettered
		s.Components = append(s.Components, *c)
	}
	s.Recoveries = recoveriesOf(crashes, append(slices.Collect(maps.Values(failovers)), f.recoveries...))
	s.Checkpoints = f.checkpoints()
	s.Checkpoints.Rollbacks = f.rollbacks
	for _, c := range f.ckpts {
		s.BadFrames += c.badFrames
	}
	return s
}

// recoveriesOf returns, for each crash, the time from the crash until
// the last failover it caused was over: the failovers that began (their
// death noticed, or a slot moved) after it and before the next crash. A
// crash takes the node's slots away and gives them back once it returns,
// and each move fails and replays every tree in flight, so both count. A
// crash with no failover over when the run ended has none.
func recoveriesOf(crashes []time.Time, failovers []span) []time.Duration {
	var out []time.Duration
	for i, at := range crashes {
		var done time.Time
		for _, f := range failovers {
			if f.at.Before(at) || (i+1 < len(crashes) && !f.at.Before(crashes[i+1])) {
				continue
			}
			if f.done.After(done) {
				done = f.done
			}
		}
		if !done.IsZero() {
			out = append(out, done.Sub(at))
		}
	}
	return out
}

// checkpoints merges the leaders' checkpoint figures.
func (f *figures) checkpoints() CheckpointSummary {
	var s CheckpointSummary
	var pauses []time.Duration
	first, latest := -1, -1
	for i, c := range f.ckpts {
		s.Taken += c.sum.Taken
		s.Abandoned += c.sum.Abandoned
		s.Latest = max(s.Latest, c.sum.Latest)
		pauses = append(pauses, c.pauses...)
		if first < 0 || c.gen < f.ckpts[first].gen {
			first = i
		}
		if c.sum.Taken > 0 && (latest < 0 || c.gen >= f.ckpts[latest].gen) {
			latest = i
		}
	}
	if first >= 0 {
		s.RestoredFrom = f.ckpts[first].restore
	}
	if latest >= 0 {
		s.Bytes, s.Duration = f.ckpts[latest].sum.Bytes, f.ckpts[latest].sum.Duration
	}
	if n := len(pauses); n > 0 {
		slices.Sort(pauses)
		s.PauseP50, s.PauseMax = pauses[n/2], pauses[n-1]
	}
	return s
}

// addCounts adds o's counters (not its components) to s.
// noteTimes keeps the earliest first root and the latest tree completion
// (UnixNano, 0: none).
func (s *Summary) noteTimes(firstRoot, lastTree int64) {
	if firstRoot > 0 && (s.firstRoot == 0 || firstRoot < s.firstRoot) {
		s.firstRoot = firstRoot
	}
	s.lastTree = max(s.lastTree, lastTree)
}

func (s *Summary) addCounts(o *Summary) {
	s.NATSMessagesOut += o.NATSMessagesOut
	s.NATSBytesOut += o.NATSBytesOut
	s.NATSMessagesIn += o.NATSMessagesIn
	s.NATSBytesIn += o.NATSBytesIn
	s.NATSRecordsOut += o.NATSRecordsOut
	s.LocalRecords += o.LocalRecords
	s.AckMessages += o.AckMessages
	s.AckRides += o.AckRides
	s.BadFrames += o.BadFrames
	s.FencedRecords += o.FencedRecords
	s.FencedFrames += o.FencedFrames
	s.DuplicateFrames += o.DuplicateFrames
	s.BackpressureSignals += o.BackpressureSignals
	s.SlowConsumers += o.SlowConsumers
	s.Reconnects += o.Reconnects
	s.PublishErrors += o.PublishErrors
	s.Discarded += o.Discarded
	s.NACKs += o.NACKs
	s.Resent += o.Resent
	s.ResendMisses += o.ResendMisses
	s.LostFrames += o.LostFrames
	s.DeadLetterErrors += o.DeadLetterErrors
	c, oc := &s.Chaos, o.Chaos
	c.FramesDropped += oc.FramesDropped
	c.RecordsDropped += oc.RecordsDropped
	c.FramesDuplicated += oc.FramesDuplicated
	c.RecordsDuplicated += oc.RecordsDuplicated
	c.FramesDelayed += oc.FramesDelayed
	c.FramesReordered += oc.FramesReordered
	c.InputsFailed += oc.InputsFailed
}

// add adds o's counters to c; the largest output log, Bloom filter and
// pending window figures win. Latency percentiles do not add up: summary
// merges the histograms instead.
func (c *ComponentSummary) add(o ComponentSummary) {
	c.Emitted += o.Emitted
	c.Executed += o.Executed
	c.Acked += o.Acked
	c.Failed += o.Failed
	c.Replayed += o.Replayed
	c.TimedOut += o.TimedOut
	c.WindowPeak = max(c.WindowPeak, o.WindowPeak)
	c.Panics += o.Panics
	c.DuplicatesDropped += o.DuplicatesDropped
	c.Suspects += o.Suspects
	c.ReEmitted += o.ReEmitted
	c.LogPeakEntries = max(c.LogPeakEntries, o.LogPeakEntries)
	c.LogPeakBytes = max(c.LogPeakBytes, o.LogPeakBytes)
	c.LogExpired += o.LogExpired
	c.BloomFill = max(c.BloomFill, o.BloomFill)
	c.BloomFPRate = max(c.BloomFPRate, o.BloomFPRate)
	c.ReExecuted += o.ReExecuted
	c.Parked += o.Parked
	c.DeadLettered += o.DeadLettered
	c.EmitErrors += o.EmitErrors
}
