package vmtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// confPath is the file under test.
const confPath = "../vm/nats-server.conf"

// natsCluster is three NATS servers started from deploy/vm/nats-server.conf,
// as on three VMs, but on this machine: localhost stands for the VMs' host
// names and every server has ports of its own.
type natsCluster struct {
	servers    []*server.Server
	logs       []*serverLog
	urls       string // the client URLs, comma-separated, as ACKFLOW_NATS has them
	conf       string // nats-server.conf as read
	routePorts []int
}

// nodeConfig is nats-server.conf as node i of the test (1-based) runs it.
// Each replacement must match, so that a change of the file that the test
// does not follow fails here instead of testing something else.
func nodeConfig(t *testing.T, conf string, i int, tlsDir, storeDir string, routePorts []int) string {
	t.Helper()
	pairs := []string{
		"server_name: vm1", fmt.Sprintf("server_name: vm%d", i),
		"listen: 0.0.0.0:4222", "listen: 127.0.0.1:-1",
		"http: 127.0.0.1:8222", "http: 127.0.0.1:-1",
		"listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", routePorts[i-1]),
		`"/etc/nats/tls/`, `"` + filepath.ToSlash(tlsDir) + "/",
		`store_dir: "/var/lib/nats"`, fmt.Sprintf("store_dir: %q", filepath.ToSlash(storeDir)),
	}
	for k, port := range routePorts {
		pairs = append(pairs, fmt.Sprintf("nats-route://vm%d.example.internal:6222", k+1), fmt.Sprintf("nats-route://localhost:%d", port))
	}
	for j := 0; j < len(pairs); j += 2 {
		if !strings.Contains(conf, pairs[j]) {
			t.Fatalf("%s has no %q; update the test with the file", confPath, pairs[j])
		}
		conf = strings.ReplaceAll(conf, pairs[j], pairs[j+1])
	}
	return conf
}

// startCluster starts the three servers and waits until each accepts
// clients. JetStream elects its meta leader some seconds later.
func startCluster(t *testing.T, p *pki, dir string) *natsCluster {
	t.Helper()
	raw, err := os.ReadFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	routePorts := freePorts(t, 3)
	c := &natsCluster{conf: string(raw), routePorts: routePorts}
	var urls []string
	for i := 1; i <= 3; i++ {
		conf := nodeConfig(t, string(raw), i, p.dir, filepath.Join(dir, fmt.Sprintf("vm%d", i)), routePorts)
		s, log := startServer(t, filepath.Join(dir, fmt.Sprintf("vm%d.conf", i)), conf)
		c.servers, c.logs = append(c.servers, s), append(c.logs, log)
		urls = append(urls, fmt.Sprintf("tls://localhost:%d", s.Addr().(*net.TCPAddr).Port))
	}
	c.urls = strings.Join(urls, ",")
	return c
}

// startServer writes conf to path, loads it with the server's own parser
// and starts it; the test's end shuts it down.
func startServer(t *testing.T, path, conf string) (*server.Server, *serverLog) {
	t.Helper()
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s (from %s): %v", path, confPath, err)
	}
	// The test sends itself SIGTERM to stop the workers; the servers must
	// not take it for theirs.
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	log := &serverLog{name: opts.ServerName}
	s.SetLogger(log, false, false)
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("NATS server %s does not accept clients after 10s; its log:\n%s", opts.ServerName, log)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of NATS server %s:\n%s", opts.ServerName, log)
		}
	})
	return s, log
}

// freePorts finds n ports that are free now; the routes of the
// configuration name them before any server listens.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		defer l.Close()
	}
	return ports
}

// violations returns the permission and authorization violations the
// servers logged, each with the user it names.
func (c *natsCluster) violations() []string {
	var v []string
	for _, l := range c.logs {
		v = append(v, l.matching("Violation", "authentication error", "authorization error", "TLS handshake error")...)
	}
	return v
}

// serverLog keeps a server's warnings and errors (and notices, for a
// failing test's output).
type serverLog struct {
	name  string
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
}

func (l *serverLog) Noticef(format string, v ...any) { l.add("INF", format, v...) }
func (l *serverLog) Warnf(format string, v ...any)   { l.add("WRN", format, v...) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.add("FTL", format, v...) }
func (l *serverLog) Errorf(format string, v ...any)  { l.add("ERR", format, v...) }
func (l *serverLog) Debugf(format string, v ...any)  {}
func (l *serverLog) Tracef(format string, v ...any)  {}

func (l *serverLog) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, l.name+": "+line)
				break
			}
		}
	}
	return out
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
