// Package webhook receives the kube-apiserver audit webhook (POSTed EventLists) and
// answers 2xx only once every event of a batch is acknowledged by the bus.
package webhook

import (
	"bytes"
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
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/input"
)

// Config configures the webhook receiver.
type Config struct {
	Addr     string
	TLSCert  string
	TLSKey   string
	ClientCA string
	// ClientAllow, when set, limits client certificates to these identities: a certificate
	// is accepted when its subject CN, one of its DNS names or one of its URIs is listed.
	ClientAllow flagenv.StringList
	TokenFile   string
	// MaxBody caps a request body (default 32 MiB); larger ones get 413.
	MaxBody int64
	// MaxInflightBytes caps the bytes of request bodies held at once (default 64 MiB, at
	// least MaxBody); a request beyond it gets 429 with Retry-After.
	MaxInflightBytes int64
	// PublishTimeout bounds the wait for the bus; past it the answer is 503, or 429 when the
	// wait was for classify to catch up (--bus-max-backlog) (default 10s).
	PublishTimeout time.Duration
	// RetryAfter is the Retry-After of a 503 or 429 (default 5s).
	RetryAfter time.Duration
	// ReloadInterval is how often the key pair and the token file are checked for changes
	// (default 10s).
	ReloadInterval time.Duration
}

// DefaultConfig is the webhook's defaults; off until Addr is set.
func DefaultConfig() Config {
	return Config{
		MaxBody:          DefaultMaxBody,
		MaxInflightBytes: DefaultMaxInflightBytes,
		PublishTimeout:   10 * time.Second,
		RetryAfter:       5 * time.Second,
		ReloadInterval:   10 * time.Second,
	}
}

// RegisterFlags adds the --webhook-* flags to fs, each defaulting to the current value of its
// field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "webhook-addr", c.Addr, "serve the apiserver audit webhook on `host:port` (empty: off)")
	fs.StringVar(&c.TLSCert, "webhook-tls-cert", c.TLSCert, "TLS certificate `file` of the webhook (required with --webhook-addr)")
	fs.StringVar(&c.TLSKey, "webhook-tls-key", c.TLSKey, "TLS key `file` of the webhook")
	fs.StringVar(&c.ClientCA, "webhook-client-ca", c.ClientCA, "CA `file`: accept apiserver client certificates signed by it (mTLS)")
	fs.Var(&c.ClientAllow, "webhook-client-allow", "accept only client certificates with one of these `identities` (subject CN, DNS or URI SAN; comma-separated or repeated); empty: any certificate of --webhook-client-ca")
	fs.StringVar(&c.TokenFile, "webhook-token-file", c.TokenFile, "`file` holding the bearer token the apiserver must send")
	fs.Int64Var(&c.MaxBody, "webhook-max-body", c.MaxBody, "largest accepted request body in `bytes` (larger: 413)")
	fs.Int64Var(&c.MaxInflightBytes, "webhook-max-inflight-bytes", c.MaxInflightBytes, "most `bytes` of request bodies handled at once (more: 429 with Retry-After); the webhook's memory is about 3 to 5 times this (see services/ingest/README.md)")
	fs.DurationVar(&c.PublishTimeout, "webhook-publish-timeout", c.PublishTimeout, "how long a request waits for the bus before answering 503 (429 when it waited for classify to catch up, see --bus-max-backlog)")
}

// On reports whether the webhook is configured.
func (c Config) On() bool { return c.Addr != "" }

// MemoryPerInflightByte is about how many bytes of memory the process needs per byte of
// request body in flight: the body, the messages made of it, and what the garbage collector
// leaves between collections (measured by BenchmarkWebhookMemory in package ingest).
const MemoryPerInflightByte = 4

// Memory is about the most memory request bodies take at once: MemoryPerInflightByte per
// byte of MaxInflightBytes.
func (c Config) Memory() int64 { return MemoryPerInflightByte * c.MaxInflightBytes }

// Defaults of the body limits.
const (
	DefaultMaxBody          = 32 << 20
	DefaultMaxInflightBytes = 64 << 20
)

// Validate checks the flags when the webhook is on.
func (c Config) Validate() error {
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
	if c.MaxBody <= 0 {
		return fmt.Errorf("--webhook-max-body %d: must be positive", c.MaxBody)
	}
	if c.MaxInflightBytes < c.MaxBody {
		return fmt.Errorf("--webhook-max-inflight-bytes %d: must be at least --webhook-max-body (%d), or a request of the largest size could never be taken", c.MaxInflightBytes, c.MaxBody)
	}
	if c.PublishTimeout <= 0 {
		return fmt.Errorf("--webhook-publish-timeout %s: must be positive", c.PublishTimeout)
	}
	if len(c.ClientAllow) > 0 && c.ClientCA == "" {
		return errors.New("--webhook-client-allow needs --webhook-client-ca: it limits which of that CA's client certificates are accepted")
	}
	return nil
}

// Input is the metrics label of this input.
const Input = "webhook"

// Server is the webhook receiver.
type Server struct {
	cfg    Config
	env    *input.Env
	em     *input.Emitter
	log    *slog.Logger
	token  *reloading[[]byte]
	cert   *reloading[*tls.Certificate]
	tlsCfg *tls.Config
	ln     net.Listener
	srv    *http.Server
	// eventHeader is shared by every event message (dead letters get their own).
	eventHeader map[string]string
	allow       map[string]bool // ClientAllow

	mu       sync.Mutex
	inflight int64                             // bytes of bodies admitted (at most MaxInflightBytes)
	reading  map[*http.ResponseController]bool // requests still reading their body
	closing  bool
}

// New loads the TLS material and token and listens on cfg.Addr.
func New(cfg Config, env *input.Env) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	em := env.Emitter(Input)
	s := &Server{cfg: cfg, env: env, em: em, log: em.Logger(), eventHeader: env.Header(Input),
		reading: map[*http.ResponseController]bool{}}
	if len(cfg.ClientAllow) > 0 {
		s.allow = map[string]bool{}
		for _, id := range cfg.ClientAllow {
			s.allow[id] = true
		}
	}
	var err error
	s.cert, err = newReloading("webhook TLS key pair", cfg.ReloadInterval, s.log, func() (*tls.Certificate, error) {
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
		s.token, err = newReloading("webhook token", cfg.ReloadInterval, s.log, func() ([]byte, error) {
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
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 && MemoryPerInflightByte*cfg.MaxInflightBytes > limit {
		s.log.Warn("--webhook-max-inflight-bytes lets request bodies take more memory than GOMEMLIMIT allows; lower it",
			"max_inflight_bytes", cfg.MaxInflightBytes, "gomemlimit", limit, "bytes_per_body_byte", MemoryPerInflightByte)
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
		// A body of --webhook-max-body must arrive within ReadTimeout (32 MiB in a minute is
		// 0.5 MiB/s); the answer may then wait PublishTimeout for the bus.
		ReadTimeout:  readTimeout,
		WriteTimeout: readTimeout + cfg.PublishTimeout + 10*time.Second,
		IdleTimeout:  2 * time.Minute,
		ErrorLog:     slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// readTimeout bounds the reading of one request, headers and body.
const readTimeout = time.Minute

// Addr is the address the receiver listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Ready reports whether the bus can take events.
func (s *Server) Ready() error { return s.env.Bus.Ready() }

// Run serves until ctx is done, then lets in-flight requests finish their publish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.ServeTLS(s.ln, "", "") }()
	s.log.Info("serving the audit webhook", "addr", s.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	// Requests still reading their body stop now and get 503 (the apiserver sends them again);
	// requests publishing may finish, as long as their publish may take.
	s.mu.Lock()
	s.closing = true
	for rc := range s.reading {
		_ = rc.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.PublishTimeout+time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// What is still open never got a 2xx: nothing of it was acknowledged, so nothing is
		// lost; the apiserver sends it again to the next receiver.
		s.log.Warn("closing connections still open at shutdown; their requests were not acknowledged and will be sent again", "err", err)
		_ = s.srv.Close()
	}
	return nil
}

func (s *Server) answer(w http.ResponseWriter, code int, msg string) {
	s.em.Answer(code)
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter.Seconds())))
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="auditlens"`)
	}
	http.Error(w, msg, code)
}

// authenticated accepts a verified client certificate (of an allowed identity, when
// --webhook-client-allow is set) or the bearer token.
func (s *Server) authenticated(r *http.Request) bool {
	if s.tlsCfg.ClientCAs != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && s.allowed(r.TLS.VerifiedChains[0][0]) {
		return true
	}
	if s.token != nil {
		// The auth scheme is case-insensitive (RFC 7235 section 2.1).
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), s.token.get()) == 1
		}
	}
	return false
}

// allowed reports whether the client certificate c names an identity of ClientAllow.
func (s *Server) allowed(c *x509.Certificate) bool {
	if s.allow == nil {
		return true
	}
	if s.allow[c.Subject.CommonName] && c.Subject.CommonName != "" {
		return true
	}
	for _, n := range c.DNSNames {
		if s.allow[n] {
			return true
		}
	}
	for _, u := range c.URIs {
		if s.allow[u.String()] {
			return true
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
		s.answer(w, http.StatusRequestEntityTooLarge, s.bodyTooLarge(r.ContentLength))
		return
	}
	// Admit the body into the in-flight budget before reading it (a body of unknown length
	// may be as large as MaxBody).
	size := r.ContentLength
	if size < 0 {
		size = s.cfg.MaxBody
	}
	if !s.admit(size) {
		s.answer(w, http.StatusTooManyRequests, fmt.Sprintf("the webhook is handling --webhook-max-inflight-bytes (%d) of requests; retry later", s.cfg.MaxInflightBytes))
		return
	}
	defer s.release(size)
	body, err := s.readBody(w, r)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.answer(w, http.StatusRequestEntityTooLarge, s.bodyTooLarge(-1))
		case errors.Is(err, errClosing):
			s.answer(w, http.StatusServiceUnavailable, "shutting down, retry later")
		default:
			s.answer(w, http.StatusBadRequest, "read body: "+err.Error())
		}
		return
	}
	if err := s.env.Bus.Ready(); err != nil {
		s.em.Retry()
		s.answer(w, http.StatusServiceUnavailable, "bus unavailable, retry later")
		return
	}
	msgs, counts, whole := s.messages(body, r.RemoteAddr)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	defer cancel()
	// An event the bus refuses for good is dead-lettered alone; the others are stored.
	err = s.em.Send(ctx, msgs, &counts, "webhook")
	if errors.Is(err, bus.ErrBacklog) {
		// Classify is behind (--bus-max-backlog): the bus is fine, the apiserver retries.
		s.em.Retry()
		s.answer(w, http.StatusTooManyRequests, "the pipeline is behind (--bus-max-backlog); retry later")
		return
	}
	if err != nil {
		s.em.Retry()
		s.em.Failed(err, "answering 503 so the apiserver retries")
		s.answer(w, http.StatusServiceUnavailable, "bus unavailable, retry later")
		return
	}
	s.em.Failed(nil, "")
	s.em.Count(counts)
	if whole != nil {
		s.answer(w, http.StatusBadRequest, "not an audit EventList: "+whole.Error())
		return
	}
	s.em.Answer(http.StatusOK)
	w.WriteHeader(http.StatusOK)
}

func (s *Server) bodyTooLarge(n int64) string {
	what := "the request body is"
	if n >= 0 {
		what = fmt.Sprintf("the request body of %d bytes is", n)
	}
	return fmt.Sprintf("%s larger than --webhook-max-body (%d bytes): lower the apiserver's --audit-webhook-batch-max-size or raise --webhook-max-body", what, s.cfg.MaxBody)
}

// admit takes n bytes of the in-flight budget, or reports that they are not free now.
func (s *Server) admit(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight+n > s.cfg.MaxInflightBytes {
		return false
	}
	s.inflight += n
	return true
}

func (s *Server) release(n int64) {
	s.mu.Lock()
	s.inflight -= n
	s.mu.Unlock()
}

var errClosing = errors.New("shutting down")

// readBody reads the body into a buffer of its announced size (no doubling), capped at
// MaxBody. At shutdown a body still arriving is given up (errClosing).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, errClosing
	}
	s.reading[rc] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.reading, rc)
		s.mu.Unlock()
	}()
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err != nil {
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			return nil, errClosing
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// messages turns a body into event messages and dead letters. whole is set when the body
// as a whole is unusable (it is then dead-lettered). Every id and header is bounded.
func (s *Server) messages(body []byte, remote string) (msgs []bus.Message, c input.Counts, whole error) {
	return split(body, s.env, s.eventHeader, s.log.With("remote", remote))
}

// split is messages without the server, for tests and fuzzing. The events go in EventBatch
// messages (an event too large for one goes alone) named by a hash of their audit ids and
// stages: the apiserver retrying the same EventList publishes the same messages, which the
// bus stores once.
func split(body []byte, env *input.Env, eventHeader map[string]string, log *slog.Logger) (msgs []bus.Message, c input.Counts, whole error) {
	cluster, maxEventSize := env.Cluster, env.MaxEventSize
	p := eventbatch.NewPacker(env.Batch, cluster, cluster+"/webhook", eventbatch.ByHash, eventHeader)
	defer func() { msgs = p.Flush(msgs) }()
	dead := func(data []byte, err error) {
		label := reason.Of(err)
		c.AddBad(label, 1)
		sum := sha256.Sum256(data)
		log.Warn("bad webhook event sent to the dead-letter stream", "reason", label, "err", bus.Short(err.Error(), 300))
		msgs = append(msgs, env.DeadLetter(cluster, Input, hex.EncodeToString(sum[:16]), "webhook", err, data))
	}
	event := func(it auditevent.Item) {
		c.Events++
		if p.Fits(len(it.Raw)) {
			msgs = p.Add(msgs, it.Raw, it.Key())
			return
		}
		// The id is cluster/auditID/stage: JetStream de-duplicates across the whole stream.
		// The auditID is the client's Audit-ID header, of any length: the id is bounded.
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: eventHeader, Data: it.Raw})
	}
	items, err := auditevent.SplitListShared(body, maxEventSize)
	if err == nil {
		for _, it := range items {
			event(it)
		}
		return msgs, c, nil
	}
	// One bad item must not cost the others: split the list ourselves and check each.
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if jerr := json.Unmarshal(body, &list); jerr != nil || len(list.Items) == 0 {
		dead(body, err)
		return msgs, c, err
	}
	for _, raw := range list.Items {
		ref, err := auditevent.Peek(raw, maxEventSize)
		if err != nil {
			dead(raw, err)
			continue
		}
		event(auditevent.Item{Ref: ref, Raw: raw})
	}
	return msgs, c, nil
}
