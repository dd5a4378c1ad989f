package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"
)

// TestEveryWayToAuthenticate starts a NATS server that knows a user with a
// password and a user with an nkey, and another that wants a token, and
// runs ackflow health with each way to authenticate, from flags and from
// the environment: the right credentials connect, wrong ones fail with an
// error that says what to check, and two ways at once are refused.
func TestEveryWayToAuthenticate(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers stop
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	users := startAuthServer(t, &server.Options{
		Users: []*server.User{{Username: "ackflow", Password: "s3cret"}},
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
	})
	tokens := startAuthServer(t, &server.Options{Authorization: "t0ken"})

	refused := "refused this client's credentials"
	for _, c := range []struct {
		name string
		url  string
		args []string
		env  map[string]string
		want string // in the error; "" for success
	}{
		{"user and password", users, []string{"--user", "ackflow", "--password", "s3cret"}, nil, ""},
		{"user and password from the environment", users, nil, map[string]string{"ACKFLOW_NATS_USER": "ackflow", "ACKFLOW_NATS_PASSWORD": "s3cret"}, ""},
		{"wrong password", users, []string{"--user", "ackflow", "--password", "wrong"}, nil, refused},
		{"no credentials", users, nil, nil, refused},
		{"user without password", users, []string{"--user", "ackflow"}, nil, "--user and --password together"},
		{"nkey", users, []string{"--nkey", seedFile}, nil, ""},
		{"unknown nkey", users, []string{"--nkey", otherFile}, nil, refused},
		{"nkey file that is no seed", users, []string{"--nkey", filepath.Join(t.TempDir(), "missing")}, nil, "nkey user seed"},
		{"token", tokens, []string{"--token", "t0ken"}, nil, ""},
		{"token from the environment", tokens, nil, map[string]string{"ACKFLOW_NATS_TOKEN": "t0ken"}, ""},
		{"wrong token", tokens, []string{"--token", "nope"}, nil, refused},
		{"two ways at once", users, []string{"--token", "t0ken", "--nkey", seedFile}, nil, "one way to authenticate"},
		{"URL from the environment", "", []string{"--token", "t0ken"}, map[string]string{"ACKFLOW_NATS": tokens}, ""},
		{"a worker with a wrong password", users, []string{"worker", "--user", "ackflow", "--password", "wrong"}, nil, refused},
		{"submit with a wrong token", tokens, []string{"submit", "wordcount", "--token", "nope"}, nil, refused},
		{"run on a server that wants a password", users, []string{"run", "wordcount", "--random-lines", "100", "--quiet", "--user", "ackflow", "--password", "s3cret"}, nil, ""},
		{"a worker where no server runs", "nats://127.0.0.1:1", []string{"worker"}, nil, "no NATS server answers"},
		{"run with a wrong password", users, []string{"run", "wordcount", "--random-lines", "100", "--quiet", "--user", "ackflow", "--password", "wrong"}, nil, refused},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := append([]string{"health", "--timeout", "2s"}, c.args...)
			if len(c.args) > 0 && slices.Contains([]string{"worker", "submit", "run"}, c.args[0]) {
				args = slices.Clone(c.args)
			}
			if c.url != "" {
				args = append(args, "--nats", c.url)
			}
			root := NewRoot(Bundled())
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(args)
			err := root.Execute()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("ackflow %s: %v", strings.Join(args, " "), err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("ackflow %s: %v; want an error saying %q", strings.Join(args, " "), err, c.want)
			}
		})
	}
}

// startAuthServer starts a NATS server with JetStream and opts' users.
func startAuthServer(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}
