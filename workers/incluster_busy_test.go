package workers

import (
	"time"

	"github.com/ackflow/ackflow/cluster"
)

// pauseHeartbeats stops the heartbeats of the node name for d, as if its
// process were too busy to send them.
func (c *inCluster) pauseHeartbeats(name string, d time.Duration) error {
	c.mu.Lock()
	n := c.nodes[name]
	c.mu.Unlock()
	if n == nil || n.co.Members == nil {
		return errNotRunning(name)
	}
	m := n.co.Members.(*cluster.MemoryMembers)
	if err := m.Pause(name); err != nil {
		return err
	}
	time.Sleep(d)
	return m.Resume(name)
}

type errNotRunning string

func (e errNotRunning) Error() string { return "node " + string(e) + " does not run" }
