package report

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/kubeclient"
	"github.com/auditlens/auditlens/services/report/page"
)

// ConsoleConfig is where and to whom the web console is served, and how much it may ask of
// the store.
type ConsoleConfig struct {
	// Addr serves the console to loopback clients only (a local browser, kubectl
	// port-forward); empty: off.
	Addr string
	// AllowRemote serves Addr to every client without authentication: for a container
	// alone on a workstation whose port is published on the host's loopback only
	// (-p 127.0.0.1:9101:9101), where the runtime's forwarding makes every client look remote.
	AllowRemote bool
	// AuthAddr serves the console to clients with a Kubernetes bearer token allowed to get
	// auditlens.io/console of the cluster (empty: off); over TLS when TLSCert is set.
	AuthAddr        string
	TLSCert, TLSKey string
	Kube            access.KubeConfig
	Page            page.Limits
}

// DefaultConsoleAddr is --report-console-addr's default: loopback only.
const DefaultConsoleAddr = "127.0.0.1:9104"

// DefaultConsoleConfig serves the console on DefaultConsoleAddr only.
func DefaultConsoleConfig() ConsoleConfig {
	return ConsoleConfig{Addr: DefaultConsoleAddr, Kube: access.DefaultKubeConfig(), Page: page.DefaultLimits()}
}

// RegisterFlags registers --report-console-addr, --report-console-auth-addr,
// --report-console-tls-*, the apiserver's flags and the page's limits.
func (c *ConsoleConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "report-console-addr", c.Addr, "`host:port` serving the web console to loopback clients only (a local browser, kubectl port-forward); empty: off")
	fs.BoolVar(&c.AllowRemote, "report-console-allow-remote", c.AllowRemote, "serve --report-console-addr to every client, unauthenticated (not only loopback): only for a container whose port is published on the host's loopback (-p 127.0.0.1:9101:9101); never where others can reach it")
	fs.StringVar(&c.AuthAddr, "report-console-auth-addr", c.AuthAddr, "`host:port` serving the web console to any client with a Kubernetes bearer token (TokenReview) allowed to get auditlens.io/console of the cluster (SubjectAccessReview); empty: off")
	fs.StringVar(&c.TLSCert, "report-console-tls-cert", c.TLSCert, "certificate `file` (PEM) of the authenticated console listener (empty: plain HTTP, for a TLS-terminating proxy in front)")
	fs.StringVar(&c.TLSKey, "report-console-tls-key", c.TLSKey, "private key `file` (PEM) of --report-console-tls-cert")
	c.Kube.RegisterFlags(fs)
	c.Page.RegisterFlags(fs)
}

// Validate checks c and never changes it.
func (c ConsoleConfig) Validate() error {
	for _, a := range []struct{ name, v string }{{"--report-console-addr", c.Addr}, {"--report-console-auth-addr", c.AuthAddr}} {
		if a.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("%s %q: want host:port", a.name, a.v)
		}
	}
	if c.AllowRemote && c.Addr == "" {
		return errors.New("--report-console-allow-remote needs --report-console-addr")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--report-console-tls-cert and --report-console-tls-key go together")
	}
	if c.AuthAddr != "" {
		if err := c.Kube.Validate(); err != nil {
			return err
		}
	}
	return c.Page.Validate()
}

// consoleServer serves the console's handler on its listeners until stopped.
type consoleServer struct {
	servers []*http.Server
	lns     []net.Listener
	tls     []bool
	who     []string
	log     *slog.Logger
	once    sync.Once
}

// newConsoleServer listens now (a bad or busy address fails at start): the loopback
// listener and, when configured, the authenticated one.
func newConsoleServer(c ConsoleConfig, kube kubeclient.Config, h http.Handler, log *slog.Logger) (*consoleServer, error) {
	s := &consoleServer{log: log}
	add := func(flagName, addr, who string, handler http.Handler, cfg *tls.Config) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s %s: %w", flagName, addr, err)
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			MaxHeaderBytes: 256 << 10, TLSConfig: cfg}
		s.servers, s.lns, s.tls, s.who = append(s.servers, srv), append(s.lns, ln), append(s.tls, cfg != nil), append(s.who, who)
		return nil
	}
	switch {
	case c.Addr != "" && c.AllowRemote:
		log.Warn("--report-console-allow-remote: the console is served to every client that reaches it, unauthenticated; "+
			"publish its port on the host's loopback only", "addr", c.Addr)
		if err := add("--report-console-addr", c.Addr, "every client (--report-console-allow-remote)", access.Anyone(h), nil); err != nil {
			return nil, err
		}
	case c.Addr != "":
		if !access.IsLoopbackListen(c.Addr) {
			log.Warn("the console listener is not bound to loopback: it answers loopback clients only, others get 403",
				"addr", c.Addr)
		}
		if err := add("--report-console-addr", c.Addr, "loopback clients", access.Loopback(h), nil); err != nil {
			return nil, err
		}
	}
	if c.AuthAddr != "" {
		rc, err := kube.REST()
		if err != nil {
			s.close()
			return nil, fmt.Errorf("--report-console-auth-addr reviews tokens through the apiserver: %w", err)
		}
		k, err := access.NewKube(rc, c.Kube, log)
		if err != nil {
			s.close()
			return nil, err
		}
		var cfg *tls.Config
		if c.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("load --report-console-tls-cert: %w", err)
			}
			cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		if err := add("--report-console-auth-addr", c.AuthAddr, "bearer tokens allowed by the apiserver", k.Handler(h), cfg); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// Addrs are the addresses listened on: the loopback listener's first when configured.
func (s *consoleServer) Addrs() []string {
	out := make([]string, len(s.lns))
	for i, ln := range s.lns {
		out[i] = ln.Addr().String()
	}
	return out
}

func (s *consoleServer) close() {
	s.once.Do(func() {
		for _, ln := range s.lns {
			_ = ln.Close()
		}
	})
}

// Run serves until ctx is done, then shuts the servers down (5 s for requests in flight).
func (s *consoleServer) Run(ctx context.Context) error {
	errc := make(chan error, len(s.servers))
	for i, srv := range s.servers {
		s.log.Info("serving the console", "addr", s.lns[i].Addr().String(), "to", s.who[i], "tls", s.tls[i])
		go func() {
			var err error
			if s.tls[i] {
				err = srv.ServeTLS(s.lns[i], "", "")
			} else {
				err = srv.Serve(s.lns[i])
			}
			errc <- err
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("console server: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range s.servers {
		_ = srv.Shutdown(sctx)
	}
	s.close()
	return runErr
}

// Ready is always nil: the console reads what the store holds.
func (s *consoleServer) Ready() error { return nil }
