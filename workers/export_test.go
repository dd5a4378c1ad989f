package workers

import "time"

// OnInProcessCluster makes a local run under cfg call f once its nodes
// have joined, with a function that stops the heartbeats of node i (in
// the order of worker-0, worker-1...) for d, as a busy process delays
// them, and returns when they beat again.
func OnInProcessCluster(cfg *Config, f func(pause func(i int, d time.Duration) error)) {
	cfg.inCluster = func(c *inCluster) {
		f(func(i int, d time.Duration) error { return c.pauseHeartbeats(c.names[i], d) })
	}
}
