package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// natsFlags are how a cluster command connects to NATS: the servers, and
// the credentials and TLS files of a secured cluster. Every flag has an
// environment variable, read when the flag is not given: secrets in the
// environment (or in files) stay out of ps and of shell history.
type natsFlags struct {
	url, creds, ca, cert, key   string
	user, password, token, nkey string
}

// natsEnv maps each flag to its environment variable.
var natsEnv = map[string]string{
	"nats": "ACKFLOW_NATS", "creds": "ACKFLOW_NATS_CREDS", "user": "ACKFLOW_NATS_USER",
	"password": "ACKFLOW_NATS_PASSWORD", "token": "ACKFLOW_NATS_TOKEN", "nkey": "ACKFLOW_NATS_NKEY",
	"tls-ca": "ACKFLOW_TLS_CA", "tls-cert": "ACKFLOW_TLS_CERT", "tls-key": "ACKFLOW_TLS_KEY",
}

func (f *natsFlags) register(fl *pflag.FlagSet) {
	f.registerURL(fl, defaultNATS, "NATS servers of the cluster, comma-separated")
}

// registerURL registers the flags with def as --nats's default and usage
// as its help.
func (f *natsFlags) registerURL(fl *pflag.FlagSet, def, usage string) {
	str := func(p *string, name, def, usage string) {
		env := natsEnv[name]
		if v := os.Getenv(env); v != "" {
			def = v
		}
		fl.StringVar(p, name, def, usage+" ($"+env+")")
	}
	str(&f.url, "nats", def, usage)
	str(&f.creds, "creds", "", "NATS credentials file (JWT and seed) to connect with")
	str(&f.user, "user", "", "NATS user name (with --password)")
	str(&f.password, "password", "", "NATS password; prefer the variable, a flag shows in ps")
	str(&f.token, "token", "", "NATS authentication token; prefer the variable, a flag shows in ps")
	str(&f.nkey, "nkey", "", "file holding the NATS nkey seed (SU...) to sign the server's challenge with")
	str(&f.ca, "tls-ca", "", "CA certificate that signed the NATS servers' certificates")
	str(&f.cert, "tls-cert", "", "client certificate, for servers that verify clients (with --tls-key)")
	str(&f.key, "tls-key", "", "client certificate's key")
}

// options turns the flags into connection options. It refuses
// combinations that would leave it unclear who connects.
func (f *natsFlags) options() ([]nats.Option, error) {
	var opts []nats.Option
	var ways []string
	if f.user != "" || f.password != "" {
		if f.user == "" || f.password == "" {
			return nil, errors.New("give --user and --password together (or ACKFLOW_NATS_USER and ACKFLOW_NATS_PASSWORD)")
		}
		ways = append(ways, "--user/--password")
		opts = append(opts, nats.UserInfo(f.user, f.password))
	}
	if f.token != "" {
		ways = append(ways, "--token")
		opts = append(opts, nats.Token(f.token))
	}
	if f.nkey != "" {
		ways = append(ways, "--nkey")
		opt, err := nats.NkeyOptionFromSeed(f.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w; give a file that holds an nkey user seed (nsc or nk -gen user makes one)", f.nkey, err)
		}
		opts = append(opts, opt)
	}
	if f.creds != "" {
		ways = append(ways, "--creds")
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if len(ways) > 1 {
		return nil, fmt.Errorf("give one way to authenticate, not %s", strings.Join(ways, " and "))
	}
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("give --tls-cert and --tls-key together")
	}
	if f.cert != "" {
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	return opts, nil
}

// connect opens a connection named name.
func (f *natsFlags) connect(name string, timeout time.Duration) (*nats.Conn, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(f.url, append([]nats.Option{nats.Name(name), nats.Timeout(timeout)}, opts...)...)
	if err != nil {
		return nil, explainConnect(f.url, err)
	}
	return nc, nil
}

// explainConnect says what to do about a failed connection to url.
func explainConnect(url string, err error) error {
	if e, ok := refusedBy(url, err); ok {
		return e
	}
	return fmt.Errorf("cannot connect to NATS at %s: %w (start one with ackflow nats, or give --nats)", url, err)
}

// refusedBy explains err if NATS at url refused this client (its
// credentials, or TLS) or could not be reached. ok is false for any other
// error.
func refusedBy(url string, err error) (_ error, ok bool) {
	var cert *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("NATS at %s refused this client's credentials (%w): check --user and --password, --token, --nkey, --creds or the client certificate (or their ACKFLOW_NATS_* and ACKFLOW_TLS_* variables)", url, err), true
	case errors.As(err, &cert):
		return fmt.Errorf("cannot verify the certificate of NATS at %s (%w): give the CA that signed it with --tls-ca, and a URL whose host name the certificate holds", url, err), true
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("NATS at %s and this client disagree on TLS (%w): use a tls:// URL and --tls-ca for a server that requires TLS", url, err), true
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("no NATS server answers at %s (%w): check that the servers run and that --nats (or ACKFLOW_NATS) lists them; ackflow nats starts one for development", url, err), true
	}
	return nil, false
}

func newHealthCmd() *cobra.Command {
	var nf natsFlags
	var worker string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if NATS with JetStream (or a worker) answers: for container healthchecks",
		Long: `health connects to NATS and checks that JetStream answers (in a NATS
cluster: that it has a meta leader), or with --worker that the named worker
process is connected. It exits 0 if so and 1 otherwise, saying why; images
FROM scratch have no shell or curl, so the healthchecks of the deploy kit
run it.`,
		Example: `  ackflow health --nats nats://127.0.0.1:4222
  ackflow health --worker w1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := nf.connect("ackflow health", timeout)
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if worker != "" {
				if _, err := nc.RequestWithContext(ctx, "ackflow.presence."+worker, nil); err != nil {
					return fmt.Errorf("worker %s does not answer: %w", worker, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "worker %s is connected\n", worker)
				return nil
			}
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			if _, err := js.AccountInfo(ctx); err != nil {
				return fmt.Errorf("JetStream does not answer at %s: %w", nf.url, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "NATS and JetStream answer at %s\n", nc.ConnectedUrlRedacted())
			return nil
		},
	}
	nf.register(cmd.Flags())
	cmd.Flags().StringVar(&worker, "worker", "", "check that this worker is connected instead")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
