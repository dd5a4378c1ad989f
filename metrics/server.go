package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the registry in Prometheus's exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// Server serves a Registry on /metrics.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen serves r's /metrics on addr (host:port; port 0 picks a free one)
// until Close. It listens before it returns, so that an address already
// in use is an error at once, not a log line while the run goes on.
func Listen(addr string, r *Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("metrics: cannot serve /metrics on %s: the address is in use by another process; give a free port (or :0 for any) or stop the process that holds it: %w", addr, err)
		}
		return nil, fmt.Errorf("metrics: cannot serve /metrics on %s; give an address of this machine as host:port, e.g. 127.0.0.1:9464: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", r.Handler())
	s := &Server{ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// Addr is the address the server listens on (with the port it picked).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: a scrape in progress gets a few seconds to
// finish, then its connection is closed. It returns when the server's
// goroutine has ended.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}
