package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Config configures a status page server.
type Config struct {
	// Source makes the snapshots the page shows.
	Source Source
	// Metrics, if set, is served on /metrics next to the page (the
	// registry's handler in local mode).
	Metrics http.Handler
	// Refresh is how often the page reloads itself (default 2 s; negative:
	// never); a visitor changes it with ?refresh=SECONDS, 0 to stop.
	Refresh time.Duration
	// SampleEvery is how often the server samples throughput for the
	// sparkline (default 1 s), which keeps History points (default 120).
	SampleEvery time.Duration
	History     int
	// Timeout bounds how long one snapshot may take (default 5 s).
	Timeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Refresh == 0 {
		c.Refresh = 2 * time.Second
	}
	if c.SampleEvery <= 0 {
		c.SampleEvery = time.Second
	}
	if c.History <= 0 {
		c.History = 120
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
}

// Server serves the status page until Close.
type Server struct {
	cfg  Config
	ln   net.Listener
	srv  *http.Server
	hist *history
	// ctx ends with Close, which stops the sampling.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Listen serves the status page of cfg.Source on addr (host:port; port 0
// picks a free one): the page on /, /metrics if cfg.Metrics is set. It
// listens before it returns, so that an address in use is an error at
// once, and samples throughput from then on.
func Listen(addr string, cfg Config) (*Server, error) {
	if cfg.Source == nil {
		return nil, errors.New("ui: no Source to show")
	}
	cfg.setDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("ui: cannot serve the status page on %s: the address is in use by another process; give a free port (or :0 for any) or stop the process that holds it: %w", addr, err)
		}
		return nil, fmt.Errorf("ui: cannot serve the status page on %s; give an address of this machine as host:port, e.g. 127.0.0.1:8080: %w", addr, err)
	}
	s := &Server{cfg: cfg, ln: ln, hist: newHistory(cfg.History)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	go func() {
		defer s.wg.Done()
		s.sample()
	}()
	return s, nil
}

// Addr is the address the server listens on (with the port it picked).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the page's address.
func (s *Server) URL() string { return "http://" + s.Addr() + "/" }

// Close stops the server and its sampling: a request in progress gets a
// few seconds to finish. It returns when its goroutines have ended.
func (s *Server) Close() error {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	s.wg.Wait()
	return err
}

// Handler serves the page on / and, if configured, /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	return mux
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	refresh := max(s.cfg.Refresh, 0)
	if v := r.URL.Query().Get("refresh"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, "refresh: give whole seconds, 0 to stop reloading", http.StatusBadRequest)
			return
		}
		refresh = time.Duration(n) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	snap, err := s.cfg.Source.Snapshot(ctx)
	if err != nil {
		snap = &Snapshot{Taken: time.Now(), Problems: []string{"cannot gather the status: " + err.Error()}}
	}
	for i := range snap.Topologies {
		snap.Topologies[i].Throughput = s.hist.rates(snap.Topologies[i].Name)
	}
	var buf bytes.Buffer
	if err := Render(&buf, snap, refresh); err != nil {
		http.Error(w, "ui: cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// sample records every topology's records counter each SampleEvery.
func (s *Server) sample() {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
		if snap, err := s.cfg.Source.Snapshot(ctx); err == nil {
			for i := range snap.Topologies {
				s.hist.add(snap.Topologies[i].Name, snap.Taken, snap.Topologies[i].Records())
			}
		}
		cancel()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// history keeps recent records counters per topology.
type history struct {
	mu     sync.Mutex
	keep   int
	points map[string][]Rate // Records and At only
}

func newHistory(keep int) *history { return &history{keep: keep, points: map[string][]Rate{}} }

func (h *history) add(topo string, at time.Time, records int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := append(h.points[topo], Rate{At: at, Records: records})
	if len(ps) > h.keep+1 {
		ps = ps[len(ps)-h.keep-1:]
	}
	h.points[topo] = ps
}

// rates turns the counters into records per second between samples. A
// counter that went back (a new cluster generation counts from zero)
// gives no rate for that interval, shown as zero.
func (h *history) rates(topo string) []Rate {
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := h.points[topo]
	if len(ps) < 2 {
		return nil
	}
	out := make([]Rate, 0, len(ps)-1)
	for i := 1; i < len(ps); i++ {
		r := Rate{At: ps[i].At, Records: ps[i].Records}
		if d := ps[i].At.Sub(ps[i-1].At).Seconds(); d > 0 && ps[i].Records >= ps[i-1].Records {
			r.PerSec = float64(ps[i].Records-ps[i-1].Records) / d
		}
		out = append(out, r)
	}
	return out
}
