// Package telemetry sets up what every auditlens service exposes: structured logs, Prometheus
// metrics, and health and readiness endpoints.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/auditlens/auditlens/lib/buildinfo"
)

// Config holds the observability flags common to every service.
type Config struct {
	MetricsAddr string
	LogFormat   string
	LogLevel    string
}

// RegisterFlags adds --metrics-addr, --log-format and --log-level to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaultMetricsAddr string) {
	fs.StringVar(&c.MetricsAddr, "metrics-addr", defaultMetricsAddr, "`host:port` serving /metrics, /healthz and /readyz (empty: off)")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: json or text")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// Validate checks the flag values.
func (c *Config) Validate() error {
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("--log-format %q: want json or text", c.LogFormat)
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: want host:port", c.MetricsAddr)
		}
	}
	return nil
}

// NewLogger returns a slog logger writing format ("json" or "text") at level to w.
func NewLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	o := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}

// NewRegistry returns a registry with the Go runtime and process collectors and
// auditlens_build_info.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Get().Collector())
	return r
}

// Check reports nil when a part is ready.
type Check func() error

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// NewServer listens on addr now (so a bad address fails at start) and serves reg's metrics.
// /readyz answers 200 only when every check passes, naming the first failure otherwise.
// Other handlers may be added to extra (nil: none) by the components; it is served for every
// other path.
func NewServer(addr string, reg *prometheus.Registry, checks map[string]Check, extra ...*http.ServeMux) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	for _, e := range extra {
		if e != nil {
			mux.Handle("/", e)
		}
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		for name, c := range checks {
			if err := c(); err != nil {
				http.Error(w, name+": "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx is done, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
