// Package firehose is ingest's Amazon Data Firehose HTTP endpoint: it receives the records
// a Firehose stream delivers (for EKS, CloudWatch Logs subscription payloads of the
// cluster's log group) and answers 200 only once the bus has stored every audit event in
// them, so that Firehose retries whatever was not stored.
//
// Protocol: https://docs.aws.amazon.com/firehose/latest/dev/httpdeliveryrequestresponse.html
// (POST, X-Amz-Firehose-Access-Key, X-Amz-Firehose-Request-Id, optional Content-Encoding:
// gzip, body {"requestId","timestamp","records":[{"data":base64}]}, answer
// {"requestId","timestamp"[,"errorMessage"]}; 200 delivered, 413 permanent, others retried).
package firehose

import (
	"compress/gzip"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/services/ingest/input"
)

// Input is the metrics label of this input.
const Input = "firehose"

// Config configures the endpoint.
type Config struct {
	Addr          string
	TLSCert       string
	TLSKey        string
	AccessKeyFile string
	// MaxBody caps a request body after decompression (default 64 MiB, Firehose's limit).
	MaxBody int64
	// PublishTimeout bounds the wait for the bus; past it the answer is 503 (default 60s;
	// Firehose waits up to 3 minutes).
	PublishTimeout time.Duration
}

// DefaultConfig is the endpoint's defaults; off until Addr is set.
func DefaultConfig() Config {
	return Config{MaxBody: 64 << 20, PublishTimeout: 60 * time.Second}
}

// RegisterFlags adds the --firehose-* flags to fs, each defaulting to the current value of its
// field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "firehose-addr", c.Addr, "serve the Amazon Data Firehose HTTP endpoint (EKS audit logs via a CloudWatch Logs subscription) on `host:port` (empty: off)")
	fs.StringVar(&c.TLSCert, "firehose-tls-cert", c.TLSCert, "TLS certificate `file` of the Firehose endpoint (empty: plain HTTP behind a TLS-terminating load balancer)")
	fs.StringVar(&c.TLSKey, "firehose-tls-key", c.TLSKey, "TLS key `file` of the Firehose endpoint")
	fs.StringVar(&c.AccessKeyFile, "firehose-access-key-file", c.AccessKeyFile, "`file` holding the access key configured on the Firehose stream (required with --firehose-addr)")
}

// On reports whether the endpoint is configured.
func (c Config) On() bool { return c.Addr != "" }

// Validate checks the flags when the endpoint is on.
func (c Config) Validate() error {
	if c.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--firehose-addr %q: want host:port", c.Addr)
	}
	if c.AccessKeyFile == "" {
		return errors.New("--firehose-addr needs --firehose-access-key-file: Firehose sends the configured access key with every request")
	}
	if c.MaxBody <= 0 || c.PublishTimeout <= 0 {
		return errors.New("the Firehose endpoint's body limit and publish timeout must be positive")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--firehose-tls-cert and --firehose-tls-key go together")
	}
	for name, f := range map[string]string{"--firehose-access-key-file": c.AccessKeyFile, "--firehose-tls-cert": c.TLSCert, "--firehose-tls-key": c.TLSKey} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s %s: %w", name, f, err)
		}
	}
	return nil
}

// Server is the Firehose endpoint.
type Server struct {
	cfg      Config
	env      *input.Env
	em       *input.Emitter
	key      []byte
	ln       net.Listener
	srv      *http.Server
	decoders sync.Pool
	answered *recent // ids of requests answered 200, so that a retry is not counted again
}

// New reads the access key and listens on cfg.Addr.
func New(cfg Config, env *input.Env) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Limits.MaxInflight < cfg.MaxBody+env.Limits.MaxDecoded {
		return nil, fmt.Errorf("--managed-max-inflight-bytes %d: must be at least the Firehose body limit (%d) plus --managed-max-decoded-bytes (%d), or the largest request could never be taken", env.Limits.MaxInflight, cfg.MaxBody, env.Limits.MaxDecoded)
	}
	key, err := os.ReadFile(cfg.AccessKeyFile)
	if err != nil {
		return nil, fmt.Errorf("read --firehose-access-key-file: %w", err)
	}
	key = []byte(strings.TrimSpace(string(key)))
	if len(key) == 0 {
		return nil, fmt.Errorf("--firehose-access-key-file %s is empty", cfg.AccessKeyFile)
	}
	s := &Server{cfg: cfg, env: env, em: env.Emitter(Input), key: key, answered: newRecent(answeredKept)}
	s.decoders.New = func() any { return envelope.NewDecoder(int(cfg.MaxBody)) }
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --firehose-addr: %w", err)
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("load the Firehose TLS key pair: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	return s, nil
}

// Addr is the address listened on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Ready reports whether the bus is. A request that fails is answered with a retryable error
// (Firehose retries it); failing readiness for it would take the endpoint out of its Service
// and leave nothing to retry against.
func (s *Server) Ready() error { return s.env.Bus.Ready() }

// Run serves until ctx is cancelled, then lets requests in flight finish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve the Firehose endpoint: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.PublishTimeout+5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	<-errc //nolint:errcheck // after Shutdown, Serve returns http.ErrServerClosed
	return nil
}

// answer writes the documented response.
func (s *Server) answer(w http.ResponseWriter, id string, code int, errMsg string) {
	s.em.Answer(code)
	body := map[string]any{"requestId": id, "timestamp": time.Now().UnixMilli()}
	if errMsg != "" {
		if len(errMsg) > 8192 {
			errMsg = errMsg[:8192]
		}
		body["errorMessage"] = errMsg
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// ServeHTTP handles one delivery.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Amz-Firehose-Request-Id")
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Amz-Firehose-Access-Key")), s.key) != 1 {
		s.answer(w, id, http.StatusUnauthorized, "wrong or missing X-Amz-Firehose-Access-Key")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.answer(w, id, http.StatusMethodNotAllowed, "POST Firehose records")
		return
	}
	// The body is admitted into the in-flight budget before it is read (one of unknown or
	// compressed length may be as large as MaxBody); what its records decode to is taken
	// from the budget as it is decoded. All of it is given back once the request is answered.
	size := r.ContentLength
	gz := strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip")
	if size < 0 || size > s.cfg.MaxBody || gz {
		size = s.cfg.MaxBody
	}
	if !s.env.Budget.TryTake(size) {
		s.busy(w, id)
		return
	}
	defer s.env.Budget.Give(size)
	if err := s.env.Bus.Ready(); err != nil {
		s.em.Retry()
		s.answer(w, id, http.StatusServiceUnavailable, "bus unavailable, retry later")
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	if gz {
		zr, err := gzip.NewReader(body)
		if err != nil {
			s.answer(w, id, http.StatusBadRequest, "gzip body: "+err.Error())
			return
		}
		defer zr.Close()
		body = &maxReader{r: zr, n: s.cfg.MaxBody}
	}
	// The body is decoded record by record as it is read: neither the body nor its records are
	// held, only the events they decode to (packed into batches as they come), within lim.
	lim := s.env.Limit()
	defer lim.Release()
	dec := s.newDecoding(lim)
	defer dec.close()
	reqID, err := readRequest(body, dec.record)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || errors.Is(err, errTooLarge):
		s.answer(w, id, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", s.cfg.MaxBody))
		return
	case errors.Is(err, envelope.ErrBusy):
		s.busy(w, id)
		return
	case errors.Is(err, envelope.ErrLimit):
		s.em.Logger().Warn("Firehose request decodes to more than --managed-max-decoded-bytes; refused (Firehose backs it up to S3 when configured)", "request", bus.Short(id, 100), "records", dec.records, "limit", s.env.Limits.MaxDecoded)
		s.answer(w, id, http.StatusRequestEntityTooLarge, fmt.Sprintf("the records decode to more than --managed-max-decoded-bytes (%d bytes): lower the stream's buffer size", s.env.Limits.MaxDecoded))
		return
	case err != nil:
		s.answer(w, id, http.StatusBadRequest, "not a Firehose request body: "+err.Error())
		return
	}
	if id == "" {
		id = reqID
	}
	msgs, counts := dec.messages(id)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	defer cancel()
	// A message the bus refuses for good (its size, a cluster name it cannot carry) is
	// dead-lettered alone; the others are stored and the answer is 200.
	if err := s.em.Send(ctx, msgs, &counts, "firehose:"+id); err != nil {
		s.em.Retry()
		s.em.Logger().Warn("publish failed; answering 503 so that Firehose retries", "request", id, "err", err)
		s.answer(w, id, http.StatusServiceUnavailable, "bus unavailable, retry later")
		return
	}
	// Firehose sends a request again, under the same id, when it did not see the answer: the
	// bus stores its events once (their ids), and they are counted once.
	if s.answered.add(bus.BoundID(id)) {
		s.em.Count(counts)
	}
	s.answer(w, id, http.StatusOK, "")
}

// busy answers 503, which Firehose retries, while the decoded bytes in flight are at their
// limit.
func (s *Server) busy(w http.ResponseWriter, id string) {
	s.em.Retry()
	s.answer(w, id, http.StatusServiceUnavailable, fmt.Sprintf("the managed sources hold --managed-max-inflight-bytes (%d) of data; retry later", s.env.Limits.MaxInflight))
}

// decoding turns the records of one request into event messages (named
// cluster/auditID/stage, so that a retried request stores nothing twice), packed as they come,
// and dead letters (named by request and record), decoding within lim.
type decoding struct {
	s       *Server
	d       *envelope.Decoder
	header  map[string]string
	events  *eventbatch.Stream
	dead    []deadRecord
	counts  input.Counts
	records int
}

// deadRecord is a record or event that did not decode; its dead letter is named once the
// request id is known (it may follow the records in the body).
type deadRecord struct {
	rec  int
	data []byte
	err  error
}

func (s *Server) newDecoding(lim *envelope.Limit) *decoding {
	d := s.decoders.Get().(*envelope.Decoder)
	d.SetLimit(lim)
	return &decoding{s: s, d: d, header: s.env.Header(Input), events: s.em.Stream(64)}
}

// close gives the decoder back.
func (dc *decoding) close() {
	dc.d.SetLimit(nil)
	dc.d.Trim(keepBuffer)
	dc.s.decoders.Put(dc.d)
}

// record decodes record i; an error wrapping envelope.ErrBusy or ErrLimit stops the request.
func (dc *decoding) record(i int, data []byte) error {
	dc.records++
	if len(data) == 0 {
		return nil
	}
	items, st, err := dc.d.Split(data, dc.s.env.MaxEventSize)
	if errors.Is(err, envelope.ErrBusy) || errors.Is(err, envelope.ErrLimit) {
		return err
	}
	if err != nil {
		// A record that does not decode is dead-lettered with its reason; the request goes on.
		dc.dead = append(dc.dead, deadRecord{i, data, err})
		return nil //nolint:nilerr // kept in dc.dead, not the request's failure
	}
	if st.Skipped > 0 {
		dc.s.em.Logger().Debug("Firehose records without audit events skipped", "records", st.Skipped, "reasons", st.Reasons)
	}
	for _, it := range items {
		if it.Err != nil {
			dc.dead = append(dc.dead, deadRecord{i, it.Raw, it.Err})
			continue
		}
		cluster := it.Origin.ClusterOr(dc.s.env.Cluster)
		dc.counts.Events++
		dc.events.Add(bus.Message{Stream: bus.Events, Cluster: cluster, ID: bus.EventID(cluster, it.Key()), Header: dc.header, Data: it.Raw})
	}
	return nil
}

// messages are the request's packed events, then its dead letters.
func (dc *decoding) messages(id string) ([]bus.Message, input.Counts) {
	msgs := dc.events.Messages()
	for n, r := range dc.dead {
		dc.counts.AddBad(reason.Of(r.err), 1)
		msgs = append(msgs, dc.s.env.DeadLetter(dc.s.env.Cluster, Input, fmt.Sprintf("%s/%d/%d", id, r.rec, n), "firehose:"+id, r.err, r.data))
	}
	return msgs, dc.counts
}

// errTooLarge: a gzip body decompresses to more than MaxBody.
var errTooLarge = errors.New("body too large")

// maxReader reads at most n bytes from r, then fails with errTooLarge.
type maxReader struct {
	r io.Reader
	n int64
}

func (m *maxReader) Read(p []byte) (int, error) {
	if m.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > m.n {
		p = p[:m.n+1] // one more, to tell "exactly n" from "more"
	}
	k, err := m.r.Read(p)
	if int64(k) > m.n {
		return int(m.n), errTooLarge
	}
	m.n -= int64(k)
	return k, err
}

// readRequest reads a Firehose request body ({"requestId", "timestamp", "records": [{"data":
// base64}, ...]}, members in any order) and calls record for each record's decoded data as
// it is read; it returns the requestId.
func readRequest(body io.Reader, record func(i int, data []byte) error) (string, error) {
	dec := json.NewDecoder(body)
	if err := delim(dec, '{'); err != nil {
		return "", err
	}
	var id string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch tok {
		case "requestId":
			if err := dec.Decode(&id); err != nil {
				return "", fmt.Errorf("requestId: %w", err)
			}
		case "records":
			if err := delim(dec, '['); err != nil {
				return "", fmt.Errorf("records: %w", err)
			}
			for i := 0; dec.More(); i++ {
				var rec struct {
					Data []byte `json:"data"` // base64 in JSON
				}
				if err := dec.Decode(&rec); err != nil {
					return "", fmt.Errorf("record %d: %w", i, err)
				}
				if err := record(i, rec.Data); err != nil {
					return "", err
				}
			}
			if err := delim(dec, ']'); err != nil {
				return "", fmt.Errorf("records: %w", err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
		}
	}
	if err := delim(dec, '}'); err != nil {
		return "", err
	}
	return id, nil
}

// delim reads the next token, which must be d.
func delim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("want %q, got %v", d, tok)
	}
	return nil
}

// keepBuffer is the largest decoder buffer kept for the next request.
const keepBuffer = 4 << 20

// answeredKept is how many request ids answered 200 are remembered.
const answeredKept = 4096

// recent is a bounded set of the last ids added.
type recent struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	next int
}

func newRecent(n int) *recent {
	return &recent{ids: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add adds id and reports whether it was new.
func (r *recent) add(id string) bool {
	if id == "" {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ids[id]; ok {
		return false
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.ids, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = struct{}{}
	return true
}
