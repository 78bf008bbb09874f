package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// health answers /healthz (the process serves) and /readyz (the relay
// streams and publishes). Neither reveals configuration.
type health struct {
	mu    sync.Mutex
	ready func() error
}

func newHealth() *health {
	return &health{ready: func() error { return errors.New("starting") }}
}

func (h *health) setReady(f func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = f
}

func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	f := h.ready
	h.mu.Unlock()
	if err := f(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// metricsServer serves /metrics, /healthz and /readyz.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
	log zerolog.Logger
}

func newMetricsServer(addr string, reg *prometheus.Registry, h *health, log zerolog.Logger) (*metricsServer, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", h.readyz)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics, /healthz and /readyz")
	return &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, log: log}, nil
}

// Run serves until ctx ends.
func (m *metricsServer) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- m.srv.Serve(m.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = m.srv.Shutdown(sctx)
		<-errc
		return nil
	}
}
