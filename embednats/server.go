package embednats

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = DefaultMaxPayload
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

// URL is the client URL, e.g. nats://127.0.0.1:4222.
func (s *Server) URL() string { return s.ns.ClientURL() }

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
