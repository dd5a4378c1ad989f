package embednats

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config describes an embedded server. The zero value is a loopback server on
// a random port with JetStream in a temporary directory removed on Shutdown.
type Config struct {
	// Addr is host:port to listen on; port 0 (or "") picks a free port on 127.0.0.1.
	Addr string
	// StoreDir holds JetStream data. Empty means a temporary directory that
	// Shutdown removes.
	StoreDir string
	// NoJetStream turns JetStream off (core NATS only).
	NoJetStream bool
	// MaxPayload overrides the server's max message size in bytes (default 8 MiB,
	// so that frames of large records fit).
	MaxPayload int32
	// Logging sends the server's own log lines to stderr.
	Logging bool
	// MaxPending, when positive, is how many bytes the server may queue
	// for one client before it calls it a slow consumer and closes its
	// connection (NATS's max_pending, 64 MiB by default): tests use a
	// small one to cause slow-consumer events.
	MaxPending int64
	// User and Password, when set, are the one user clients must log in
	// as; Token, when set, is the token they must present instead.
	User, Password, Token string
	// TLSCert and TLSKey, when set, make the server require TLS with this
	// certificate; TLSCA, with them, makes it also require and verify
	// client certificates signed by that CA.
	TLSCert, TLSKey, TLSCA string
}

// Server is a running embedded NATS server.
type Server struct {
	ns      *server.Server
	tempDir string
}

// DefaultMaxPayload is larger than NATS's 1 MiB default: ackflow batches
// records per destination, and a batch of large records must still fit.
const DefaultMaxPayload = 8 << 20

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	host, port := "127.0.0.1", 0
	if cfg.Addr != "" {
		h, p, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("embednats: bad address %q (want host:port, e.g. 127.0.0.1:4222): %w", cfg.Addr, err)
		}
		if h != "" {
			host = h
		}
		if port, err = strconv.Atoi(p); err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("embednats: bad port in %q: want 0-65535", cfg.Addr)
		}
	}
	s := &Server{}
	opts := &server.Options{
		Host:       host,
		Port:       port,
		NoLog:      !cfg.Logging,
		NoSigs:     true,
		MaxPayload: cfg.MaxPayload,
		JetStream:  !cfg.NoJetStream,
		StoreDir:   cfg.StoreDir,
		MaxPending: cfg.MaxPending,
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	if err := secure(opts, cfg); err != nil {
		return nil, err
	}
	if port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.JetStream && opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "ackflow-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embednats: creating a JetStream store directory: %w", err)
		}
		s.tempDir = dir
		opts.StoreDir = dir
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("embednats: %w", err)
	}
	if cfg.Logging {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		s.cleanup()
		return nil, errors.New("embednats: server did not accept connections within 10s; is the address already in use?")
	}
	s.ns = ns
	return s, nil
}

// secure sets the server's authentication and TLS from cfg.
func secure(opts *server.Options, cfg Config) error {
	if (cfg.User == "") != (cfg.Password == "") {
		return errors.New("embednats: give a user and a password together")
	}
	if cfg.User != "" && cfg.Token != "" {
		return errors.New("embednats: give a user and password or a token, not both")
	}
	opts.Username, opts.Password, opts.Authorization = cfg.User, cfg.Password, cfg.Token
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") || cfg.TLSCA != "" && cfg.TLSCert == "" {
		return errors.New("embednats: give a TLS certificate and its key together (and a client CA only with them)")
	}
	if cfg.TLSCert == "" {
		return nil
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CaFile: cfg.TLSCA, Verify: cfg.TLSCA != ""})
	if err != nil {
		return fmt.Errorf("embednats: TLS: %w", err)
	}
	opts.TLSConfig, opts.TLS, opts.TLSVerify, opts.TLSTimeout = tc, true, cfg.TLSCA != "", 2
	return nil
}

// URL is the client URL, e.g. nats://127.0.0.1:4222.
func (s *Server) URL() string { return s.ns.ClientURL() }

// InProcess is the option that connects a client of this process to the
// server through memory (nats.InProcessServer) instead of a TCP socket on
// loopback: the same protocol and server, without the kernel's socket
// copies, the system calls and the wake-ups of Go's network poller that
// every message otherwise costs on both sides.
func (s *Server) InProcess() nats.Option { return nats.InProcessServer(s.ns) }

// Shutdown stops the server, waits for it, and removes a temporary store.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.cleanup()
}

// WaitForShutdown blocks until the server stops (for `ackflow nats`).
func (s *Server) WaitForShutdown() { s.ns.WaitForShutdown() }

func (s *Server) cleanup() {
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
}
