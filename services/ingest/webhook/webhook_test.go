package webhook_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/ingest/backlog"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testpki"
	"github.com/auditlens/auditlens/services/ingest/metrics"
	"github.com/auditlens/auditlens/services/ingest/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

// pki is a throwaway CA with a server and a client certificate, written to files.
type pki struct {
	dir                   string
	caPool                *x509.CertPool
	serverCert, serverKey string
	clientCA              string
	client                tls.Certificate
	otherClient           tls.Certificate // signed by another CA
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	ca, caKey := testpki.Cert(t, "auditlens test CA", nil, nil, true)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	p.ca, p.caKey = ca, caKey
	srv, srvKey := testpki.Cert(t, "localhost", ca, caKey, false)
	p.serverCert, p.serverKey = testpki.WriteFiles(t, p.dir, "server", srv, srvKey)
	p.clientCA, _ = testpki.WriteFiles(t, p.dir, "ca", ca, caKey)
	cli, cliKey := testpki.Cert(t, "kube-apiserver", ca, caKey, false)
	p.client = tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	other, otherKey := testpki.Cert(t, "other CA", nil, nil, true)
	oc, ocKey := testpki.Cert(t, "intruder", other, otherKey, false)
	p.otherClient = tls.Certificate{Certificate: [][]byte{oc.Raw}, PrivateKey: ocKey}
	return p
}

type fixture struct {
	t    *testing.T
	pki  *pki
	bus  *natsbus.Bus
	srv  *webhook.Server
	url  string
	m    *metrics.Ingest
	stop func()
}

const token = "s3cret-token"

func setup(t *testing.T, maxBody int64) *fixture {
	t.Helper()
	return setupWith(t, maxBody, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
}

// setupWith starts a webhook on a bus opened with nc; tune may hold func(*webhook.Config),
// func(*input.Env) and func(*natsbus.Bus) input.Bus (what the webhook publishes
// through instead of the bus itself).
func setupWith(t *testing.T, maxBody int64, nc natsbus.Config, tune ...any) *fixture {
	t.Helper()
	p := newPKI(t)
	nc.StallWait, nc.AckTimeout = time.Second, 2*time.Second
	b, err := natsbus.Open(context.Background(), nc)
	if err != nil {
		enginetest.Unavailable(t, "embedded nats", err)
	}
	tokFile := filepath.Join(p.dir, "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	cfg := webhook.DefaultConfig()
	cfg.Addr, cfg.TLSCert, cfg.TLSKey, cfg.ClientCA, cfg.TokenFile = "127.0.0.1:0", p.serverCert, p.serverKey, p.clientCA, tokFile
	cfg.MaxBody, cfg.MaxInflightBytes, cfg.PublishTimeout = maxBody, max(webhook.DefaultMaxInflightBytes, maxBody), 3*time.Second
	env := input.Env{Cluster: "test", Node: "cp-1", MaxEventSize: 1 << 20, Metrics: m}
	var pub input.Bus = b
	for _, f := range tune {
		switch f := f.(type) {
		case func(*webhook.Config):
			f(&cfg)
		case func(*input.Env):
			f(&env)
		case func(*natsbus.Bus) input.Bus:
			pub = f(b)
		default:
			t.Fatalf("setupWith: cannot tune with %T", f)
		}
	}
	env.Bus = pub
	srv, err := webhook.New(cfg, input.MustEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	f := &fixture{t: t, pki: p, bus: b, srv: srv, url: "https://" + srv.Addr() + "/audit", m: m}
	f.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		b.Close()
	}
	t.Cleanup(f.stop)
	return f
}

// post sends body with the bearer token tok ("" for none) and optionally a client cert.
func (f *fixture) post(body []byte, tok string, cert *tls.Certificate) *http.Response {
	f.t.Helper()
	tc := &tls.Config{RootCAs: f.pki.caPool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// retry posts body with the token as the apiserver retries a batch: again every 100 ms until
// it is taken (200), at most 50 times; it returns the last answer.
func (f *fixture) retry(body []byte) *http.Response {
	f.t.Helper()
	for i := 0; ; i++ {
		resp := f.post(body, token, nil)
		if resp.StatusCode == http.StatusOK || i == 50 {
			return resp
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// count returns the number of events (messages, on another stream than events) in stream s:
// an EventBatch counts the events it holds.
func (f *fixture) count(s bus.Stream) int {
	f.t.Helper()
	c, err := f.bus.Consumer(s, "count"+fmt.Sprint(time.Now().UnixNano()), bus.ConsumerOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	// Read until nothing more arrives for 500 ms (a loaded machine may take seconds for the
	// first delivery: an empty stream is given 3 s).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	n, last := 0, time.Now().Add(2500*time.Millisecond)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			idle := time.Since(last) > 500*time.Millisecond
			mu.Unlock()
			if idle {
				cancel()
			}
		}
	}()
	_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
		mu.Lock()
		n += eventbatch.Count(d.Header)
		last = time.Now()
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	return n
}

// eventList builds an EventList of events from..to-1 the way the apiserver sends it.
func eventList(ev testlog.Events, from, to int, extra ...string) []byte {
	var items []string
	for i := from; i < to; i++ {
		e, _ := ev.Event(i)
		items = append(items, string(e))
	}
	items = append(items, extra...)
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[` + strings.Join(items, ",") + `]}`)
}

// TestWebhookPublishesEventListsInBatches: the events of one EventList travel in EventBatch
// messages of at most --bus-batch-max-events, and a retry of the list is stored once.
func TestWebhookPublishesEventListsInBatches(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 8<<20, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()}, func(o *input.Env) { o.Batch = eventbatch.DefaultConfig(); o.Batch.MaxEvents = 20 })
	for range 2 {
		if resp := f.post(eventList(ev, 0, 50), token, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	c, err := f.bus.Consumer(bus.Events, "messages", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var sizes []int
	_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
		if !eventbatch.IsBatch(d.Header) {
			t.Errorf("message %s is not a batch", d.ID)
		}
		sizes = append(sizes, eventbatch.Count(d.Header))
	})
	if len(sizes) != 3 || sizes[0] != 20 || sizes[1] != 20 || sizes[2] != 10 {
		t.Errorf("events per message %v, want [20 20 10] (the retry stored once)", sizes)
	}
}

func TestWebhook(t *testing.T) {
	ev := testlog.Load(t)
	f := setup(t, 1<<20)
	for _, tc := range []struct {
		name       string
		body       []byte
		tok        string
		cert       *tls.Certificate
		code       int
		events     int
		deadLetter int
	}{
		{"token", eventList(ev, 0, 50), token, nil, 200, 50, 0},
		{"client certificate", eventList(ev, 50, 60), "", &f.pki.client, 200, 60, 0},
		{"retry of the same batch is stored once", eventList(ev, 0, 50), token, nil, 200, 60, 0},
		{"wrong token", eventList(ev, 100, 110), "not-the-token", nil, 401, 60, 0},
		{"no credentials", eventList(ev, 100, 110), "", nil, 401, 60, 0},
		{"certificate of another CA", eventList(ev, 100, 110), "", &f.pki.otherClient, 401, 60, 0},
		{"oversized body", eventList(ev, 100, 2000), token, nil, 413, 60, 0},
		{"bad item is dead-lettered, the others stored", eventList(ev, 60, 70, `{"kind":"Event","stage":"x"}`), token, nil, 200, 70, 1},
		{"not JSON", []byte("hello"), token, nil, 400, 70, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.post(tc.body, tc.tok, tc.cert)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if got := f.count(bus.Events); got != tc.events {
				t.Errorf("%d events on the bus, want %d", got, tc.events)
			}
			if got := f.count(bus.DeadLetter); got != tc.deadLetter {
				t.Errorf("%d dead letters, want %d", got, tc.deadLetter)
			}
		})
	}
}

// A rotated token and a renewed server certificate take effect without a restart; a token
// file caught empty mid-update keeps the last good token.
func TestWebhookReloadsTokenAndCertificate(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 1<<20, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()},
		func(c *webhook.Config) { c.ReloadInterval = 20 * time.Millisecond })
	first := f.post(eventList(ev, 0, 1), token, nil)
	if first.StatusCode != http.StatusOK {
		t.Fatalf("status %d before the rotation", first.StatusCode)
	}
	oldSerial := first.TLS.PeerCertificates[0].SerialNumber

	// Rotate as Kubernetes does for a mounted Secret: new files moved into place.
	replace := func(path string, data []byte) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	tokFile := filepath.Join(f.pki.dir, "token")
	replace(tokFile, []byte("rotated-token\n"))
	ca, caKey := testpki.Cert(t, "renewal CA", nil, nil, true)
	f.pki.caPool.AddCert(ca)
	srv, srvKey := testpki.Cert(t, "localhost", ca, caKey, false)
	crt, key := testpki.WriteFiles(t, f.pki.dir, "renewed", srv, srvKey)
	for _, pair := range [][2]string{{crt, f.pki.serverCert}, {key, f.pki.serverKey}} {
		data, err := os.ReadFile(pair[0])
		if err != nil {
			t.Fatal(err)
		}
		replace(pair[1], data)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := f.post(eventList(ev, 1, 2), "rotated-token", nil)
		if resp.StatusCode == http.StatusOK && resp.TLS.PeerCertificates[0].SerialNumber.Cmp(srv.SerialNumber) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated token or certificate not taken: status %d, serial %v (old %v, new %v)", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber, oldSerial, srv.SerialNumber)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := f.post(eventList(ev, 2, 3), token, nil).StatusCode; code != 401 {
		t.Fatalf("old token: status %d, want 401", code)
	}
	replace(tokFile, nil)
	time.Sleep(100 * time.Millisecond)
	if code := f.post(eventList(ev, 2, 3), "rotated-token", nil).StatusCode; code != 200 {
		t.Fatalf("after an empty token file: status %d, want the last good token kept (200)", code)
	}
}

// TestWebhookBusOutage stops the NATS server: the webhook answers 503 with Retry-After and
// is not ready; once the server is back on the same store, the apiserver's retry of the same
// batch is stored once.
func TestWebhookBusOutage(t *testing.T) {
	ev := testlog.Load(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv, err := natsbus.StartServer(dir, addr)
	if err != nil {
		enginetest.Unavailable(t, "embedded nats", err)
	}
	f := setupWith(t, 1<<20, natsbus.Config{URL: "nats://" + addr})
	if resp := f.post(eventList(ev, 0, 10), token, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d before the outage", resp.StatusCode)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	resp := f.post(eventList(ev, 10, 20), token, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if err := f.srv.Ready(); err == nil {
		t.Error("ready while the bus is down")
	}
	srv, err = natsbus.StartServer(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	deadline := time.Now().Add(60 * time.Second)
	for f.srv.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// The apiserver retries the batch; parts of it may have been stored before the outage.
	if resp := f.retry(eventList(ev, 10, 20)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after the bus came back", resp.StatusCode)
	}
	if got := f.count(bus.Events); got != 20 {
		t.Errorf("%d events on the bus, want 20", got)
	}
}

// While classify is behind by --bus-max-backlog, a request waits at most
// --webhook-publish-timeout, then gets 429 with Retry-After (the bus is fine: not 503); the
// apiserver's retry is stored once classify caught up, and nothing twice.
func TestWebhookAnswers429WhileClassifyIsBehind(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 1<<20, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()},
		func(c *webhook.Config) { c.PublishTimeout = 500 * time.Millisecond },
		func(b *natsbus.Bus) input.Bus {
			return backlog.New(backlog.Config{Max: 1, Group: "classify"}, b, nil, nil)
		})
	if resp := f.post(eventList(ev, 0, 10), token, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d below the bound, want 200", resp.StatusCode)
	}
	start := time.Now()
	resp := f.post(eventList(ev, 10, 20), token, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q at the bound, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the request was held %s, past --webhook-publish-timeout", took)
	}
	if err := f.srv.Ready(); err != nil {
		t.Errorf("not ready while only classify is behind: %v", err)
	}
	// classify consumes; the apiserver's retry goes through.
	c, err := f.bus.Consumer(bus.Events, "classify", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) { _ = d.Ack(ctx) }) })
	defer func() { cancel(); wg.Wait() }()
	if resp := f.retry(eventList(ev, 10, 20)); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d once classify consumed, want 200", resp.StatusCode)
	}
	if got := f.count(bus.Events); got != 20 {
		t.Errorf("%d events on the bus, want 20", got)
	}
}
