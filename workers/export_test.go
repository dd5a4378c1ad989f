package workers

// RunLocalAsInProcessCluster makes every local run of the tests an
// in-process cluster (Config.InProcessCluster) until the returned func
// is called.
func RunLocalAsInProcessCluster() (reset func()) {
	inProcessForTests.Store(true)
	return func() { inProcessForTests.Store(false) }
}
