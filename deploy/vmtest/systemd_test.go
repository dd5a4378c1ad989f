package vmtest

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The unit and environment file under test.
const (
	unitPath = "../vm/ackflow-worker.service"
	envPath  = "../vm/ackflow-worker.env"
)

// unit is what the test reads from a systemd unit: its directives, by
// name, with the continuation lines of each value joined.
type unit map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	var cont string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cont == "" && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "[")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, cont = cont+line, ""
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=value", path, line)
		}
		u[key] = append(u[key], value)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one is the value of a directive that must appear once.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	if len(u[key]) != 1 {
		t.Fatalf("%s has %d %s= lines, want one", unitPath, len(u[key]), key)
	}
	return u[key][0]
}

// readEnv reads an EnvironmentFile= of KEY=value lines, as systemd does
// for the simple values it should hold (no quotes, no escapes).
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(key, " \t") || strings.ContainsAny(value, `"'\`) {
			t.Fatalf("%s: %q is not a plain KEY=value line", path, line)
		}
		env[key] = value
	}
	return env
}

var varWord = regexp.MustCompile(`^\$(\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$`)

// execArgs expands ExecStart the way systemd does for the forms the unit
// uses: a word ${VAR} becomes exactly one argument (empty if VAR is unset),
// a word $VAR becomes VAR's value split at white space (nothing if empty).
// It refuses a ${VAR} that env lacks, which systemd would pass as an empty
// argument, and any other use of $.
func execArgs(t *testing.T, execStart string, env map[string]string) []string {
	t.Helper()
	var args []string
	for _, w := range strings.Fields(execStart) {
		m := varWord.FindStringSubmatch(w)
		switch {
		case m == nil && strings.Contains(w, "$"):
			t.Fatalf("%s: ExecStart word %q: the test expands only whole-word ${VAR} and $VAR", unitPath, w)
		case m == nil:
			args = append(args, w)
		case m[2] != "":
			v, ok := env[m[2]]
			if !ok {
				t.Fatalf("%s uses ${%s}, which %s does not set", unitPath, m[2], envPath)
			}
			args = append(args, v)
		default:
			args = append(args, strings.Fields(env[m[3]])...)
		}
	}
	return args
}

// workerArgs are the arguments of `ackflow worker` that the unit runs with
// the environment file, after override replaces some of the file's values
// (each of which the file must set).
func workerArgs(t *testing.T, override map[string]string) []string {
	t.Helper()
	u := readUnit(t, unitPath)
	env := readEnv(t, envPath)
	for k, v := range override {
		if _, ok := env[k]; !ok {
			t.Fatalf("%s does not set %s", envPath, k)
		}
		env[k] = v
	}
	args := execArgs(t, u.one(t, "ExecStart"), env)
	if len(args) < 2 || args[0] != "/usr/local/bin/ackflow" || args[1] != "worker" {
		t.Fatalf("%s runs %q, want /usr/local/bin/ackflow worker ...", unitPath, args)
	}
	return args[1:]
}

// stopTimeout is how long systemd waits after KillSignal= before SIGKILL.
func stopTimeout(t *testing.T) time.Duration {
	t.Helper()
	u := readUnit(t, unitPath)
	if sig := u.one(t, "KillSignal"); sig != "SIGTERM" {
		t.Fatalf("%s stops the worker with %s; the worker leaves the cluster on SIGTERM", unitPath, sig)
	}
	d, err := time.ParseDuration(u.one(t, "TimeoutStopSec"))
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec: %v (the test reads Go durations such as 30s)", unitPath, err)
	}
	return d
}

// TestWorkerUnitFlags checks that the unit and its environment file make
// a command line that `ackflow worker` accepts, without the cluster.
func TestWorkerUnitFlags(t *testing.T) {
	args := workerArgs(t, nil)
	cmd, err := workerCommand(args)
	if err != nil {
		t.Fatal(err)
	}
	fl := cmd.Flags()
	if urls, _ := fl.GetString("nats"); len(strings.Split(urls, ",")) != 3 || strings.Count(urls, "tls://") != 3 {
		t.Errorf("--nats %s: want the three servers, each tls://", urls)
	}
	if n, _ := fl.GetInt("replicas"); n != 3 {
		t.Errorf("--replicas %d, want 3", n)
	}
	for _, f := range []string{"tls-ca", "tls-cert", "tls-key", "name", "metrics"} {
		if v, _ := fl.GetString(f); v == "" {
			t.Errorf("--%s is empty", f)
		}
	}
	if d := stopTimeout(t); d < 10*time.Second {
		t.Errorf("TimeoutStopSec=%v leaves a worker too little time to leave the cluster", d)
	}
}
