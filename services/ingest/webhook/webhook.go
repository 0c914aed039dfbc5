// Package webhook receives the kube-apiserver audit webhook (POSTed EventLists) and
// answers 2xx only once every event of a batch is acknowledged by the bus.
package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// Config configures the webhook receiver.
type Config struct {
	Addr      string
	TLSCert   string
	TLSKey    string
	ClientCA  string
	TokenFile string
	// MaxBody caps a request body (default 32 MiB); larger ones get 413.
	MaxBody int64
	// PublishTimeout bounds the wait for the bus; past it the answer is 503 (default 10s).
	PublishTimeout time.Duration
	// RetryAfter is the Retry-After of a 503 (default 5s).
	RetryAfter time.Duration
	// ReloadInterval is how often the key pair and the token file are checked for changes
	// (default 10s).
	ReloadInterval time.Duration
}

// RegisterFlags adds the --webhook-* flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "webhook-addr", "", "serve the apiserver audit webhook on `host:port` (empty: off)")
	fs.StringVar(&c.TLSCert, "webhook-tls-cert", "", "TLS certificate `file` of the webhook (required with --webhook-addr)")
	fs.StringVar(&c.TLSKey, "webhook-tls-key", "", "TLS key `file` of the webhook")
	fs.StringVar(&c.ClientCA, "webhook-client-ca", "", "CA `file`: accept apiserver client certificates signed by it (mTLS)")
	fs.StringVar(&c.TokenFile, "webhook-token-file", "", "`file` holding the bearer token the apiserver must send")
	fs.Int64Var(&c.MaxBody, "webhook-max-body", 32<<20, "largest accepted request body in `bytes` (larger: 413)")
	fs.DurationVar(&c.PublishTimeout, "webhook-publish-timeout", 10*time.Second, "how long a request waits for the bus before answering 503")
}

func (c Config) withDefaults() Config {
	if c.MaxBody <= 0 {
		c.MaxBody = 32 << 20
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.ReloadInterval <= 0 {
		c.ReloadInterval = 10 * time.Second
	}
	return c
}

// Validate checks the flags when the webhook is on.
func (c *Config) Validate() error {
	if c.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--webhook-addr %q: want host:port", c.Addr)
	}
	if c.TLSCert == "" || c.TLSKey == "" {
		return errors.New("--webhook-addr needs --webhook-tls-cert and --webhook-tls-key: the apiserver sends audit data over TLS")
	}
	if c.ClientCA == "" && c.TokenFile == "" {
		return errors.New("--webhook-addr needs client authentication: --webhook-client-ca, --webhook-token-file, or both")
	}
	for flagName, f := range map[string]string{"--webhook-tls-cert": c.TLSCert, "--webhook-tls-key": c.TLSKey, "--webhook-client-ca": c.ClientCA, "--webhook-token-file": c.TokenFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s %s: %w", flagName, f, err)
		}
	}
	if c.MaxBody < 0 {
		return fmt.Errorf("--webhook-max-body %d: must be positive", c.MaxBody)
	}
	return nil
}

// Bus is what the receiver needs from the bus.
type Bus interface {
	bus.Publisher
	Ready() error
}

// Options are the receiver's collaborators.
type Options struct {
	Cluster      string
	Node         string
	MaxEventSize int
	Logger       *slog.Logger
	Metrics      *metrics.Ingest
}

// Server is the webhook receiver.
type Server struct {
	cfg    Config
	opt    Options
	bus    Bus
	token  *reloading[[]byte]
	cert   *reloading[*tls.Certificate]
	tlsCfg *tls.Config
	ln     net.Listener
	srv    *http.Server
	failed atomic.Bool
	// eventHeader is shared by every event message (dead letters get their own).
	eventHeader map[string]string
}

// New loads the TLS material and token and listens on cfg.Addr.
func New(cfg Config, b Bus, opt Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	opt.Logger = opt.Logger.With("input", "webhook")
	if opt.Metrics == nil {
		opt.Metrics = metrics.New(nil)
	}
	s := &Server{cfg: cfg, opt: opt, bus: b, eventHeader: map[string]string{bus.HeaderNode: opt.Node}}
	var err error
	s.cert, err = newReloading("webhook TLS key pair", cfg.ReloadInterval, opt.Logger, func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load --webhook-tls-cert/--webhook-tls-key: %w", err)
		}
		return &cert, nil
	}, cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, err
	}
	s.tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return s.cert.get(), nil
	}}
	if cfg.ClientCA != "" {
		pem, err := os.ReadFile(cfg.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("read --webhook-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--webhook-client-ca %s: no PEM certificate in it", cfg.ClientCA)
		}
		s.tlsCfg.ClientCAs = pool
		s.tlsCfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if cfg.TokenFile != "" {
		s.token, err = newReloading("webhook token", cfg.ReloadInterval, opt.Logger, func() ([]byte, error) {
			tok, err := os.ReadFile(cfg.TokenFile)
			if err != nil {
				return nil, fmt.Errorf("read --webhook-token-file: %w", err)
			}
			if tok = []byte(strings.TrimSpace(string(tok))); len(tok) == 0 {
				return nil, fmt.Errorf("--webhook-token-file %s is empty", cfg.TokenFile)
			}
			return tok, nil
		}, cfg.TokenFile)
		if err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --webhook-addr %s: %w", cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s,
		TLSConfig:         s.tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(opt.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Addr is the address the receiver listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Ready reports whether the bus can take events.
func (s *Server) Ready() error { return s.bus.Ready() }

// Run serves until ctx is done, then lets in-flight requests finish their publish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.ServeTLS(s.ln, "", "") }()
	s.opt.Logger.Info("serving the audit webhook", "addr", s.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.PublishTimeout+5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("webhook shutdown: %w", err)
	}
	return nil
}

func (s *Server) answer(w http.ResponseWriter, code int, msg string) {
	s.opt.Metrics.Requests.WithLabelValues(strconv.Itoa(code)).Inc()
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter.Seconds())))
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens"`)
	}
	http.Error(w, msg, code)
}

// authenticated accepts a verified client certificate or the bearer token.
func (s *Server) authenticated(r *http.Request) bool {
	if s.tlsCfg.ClientCAs != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if s.token != nil {
		h := r.Header.Get("Authorization")
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), s.token.get()) == 1
		}
	}
	return false
}

// ServeHTTP handles one webhook POST.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authenticated(r) {
		s.answer(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.answer(w, http.StatusMethodNotAllowed, "POST an audit EventList")
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		s.answer(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", s.cfg.MaxBody))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.answer(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", s.cfg.MaxBody))
			return
		}
		s.answer(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	if err := s.bus.Ready(); err != nil {
		s.opt.Metrics.Retries.WithLabelValues(metrics.Webhook).Inc()
		s.answer(w, http.StatusServiceUnavailable, "bus unavailable, retry later")
		return
	}
	msgs, events, bad, whole := s.messages(body, r.RemoteAddr)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	defer cancel()
	if len(msgs) > 0 {
		if err := s.bus.Publish(ctx, msgs...); err != nil {
			if errors.Is(err, bus.ErrTooLarge) {
				// Permanent: a retry of the same batch would fail the same way.
				s.opt.Logger.Warn("an event of the batch is larger than the bus accepts", "err", err)
				s.answer(w, http.StatusRequestEntityTooLarge, "an event is larger than the bus accepts; lower --webhook-max-body or raise the bus's limit")
				return
			}
			s.opt.Metrics.Retries.WithLabelValues(metrics.Webhook).Inc()
			if !s.failed.Swap(true) {
				s.opt.Logger.Warn("publish failed; answering 503 so the apiserver retries", "err", err)
			}
			s.answer(w, http.StatusServiceUnavailable, "bus unavailable, retry later")
			return
		}
	}
	if s.failed.Swap(false) {
		s.opt.Logger.Info("publishing again")
	}
	s.opt.Metrics.Published.WithLabelValues(metrics.Webhook).Add(float64(events))
	for reason, n := range bad {
		s.opt.Metrics.Bad.WithLabelValues(metrics.Webhook, reason).Add(float64(n))
	}
	if whole != nil {
		s.answer(w, http.StatusBadRequest, "not an audit EventList: "+whole.Error())
		return
	}
	s.opt.Metrics.Requests.WithLabelValues("200").Inc()
	w.WriteHeader(http.StatusOK)
}

// messages turns a body into event messages and dead letters. whole is set when the body
// as a whole is unusable (it is then dead-lettered).
func (s *Server) messages(body []byte, remote string) (msgs []bus.Message, events int, bad map[string]int, whole error) {
	dead := func(data []byte, err error) {
		if bad == nil {
			bad = map[string]int{}
		}
		reason := metrics.Reason(err)
		bad[reason]++
		sum := sha256.Sum256(data)
		h := map[string]string{bus.HeaderNode: s.opt.Node, bus.HeaderSource: "webhook"}
		h[bus.HeaderReason] = err.Error()
		if len(h[bus.HeaderReason]) > 512 {
			h[bus.HeaderReason] = h[bus.HeaderReason][:512]
		}
		if len(data) > 16<<10 {
			data = data[:16<<10]
		}
		s.opt.Logger.Warn("bad webhook event sent to the dead-letter stream", "remote", remote, "reason", reason, "err", h[bus.HeaderReason])
		msgs = append(msgs, bus.Message{Stream: bus.DeadLetter, Cluster: s.opt.Cluster, ID: "webhook/" + hex.EncodeToString(sum[:16]), Header: h, Data: data})
	}
	event := func(it auditevent.Item) {
		events++
		// The id is cluster/auditID/stage: JetStream de-duplicates across the whole stream.
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: s.opt.Cluster, ID: s.opt.Cluster + "/" + it.Key(), Header: s.eventHeader, Data: it.Raw})
	}
	items, err := auditevent.SplitList(body, s.opt.MaxEventSize)
	if err == nil {
		for _, it := range items {
			event(it)
		}
		return msgs, events, bad, nil
	}
	// One bad item must not cost the others: split the list ourselves and check each.
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if jerr := json.Unmarshal(body, &list); jerr != nil || len(list.Items) == 0 {
		dead(body, err)
		return msgs, events, bad, err
	}
	for _, raw := range list.Items {
		ref, err := auditevent.Peek(raw, s.opt.MaxEventSize)
		if err != nil {
			dead(raw, err)
			continue
		}
		event(auditevent.Item{Ref: ref, Raw: raw})
	}
	return msgs, events, bad, nil
}
