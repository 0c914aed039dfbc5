package webhook_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/webhook"
)

// stockNATS starts a JetStream server with nats-server's defaults (1 MiB max payload) on
// a TCP port and returns its URL.
func stockNATS(t *testing.T) string {
	t.Helper()
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		enginetest.Unavailable(t, "nats-server", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL()
}

// deadLetters returns the dead letters on the bus.
func (f *fixture) deadLetters() []bus.Delivery {
	f.t.Helper()
	c, err := f.bus.Consumer(bus.DeadLetter, "dl"+strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", ""), bus.ConsumerOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var out []bus.Delivery
	_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) { out = append(out, *d) })
	return out
}

// Issue 9, defect 2: on a bus with the stock 1 MiB max payload, one item the bus refuses
// for its size made the whole EventList a 413, which the apiserver does not retry: the
// other events were lost. Now that item is dead-lettered alone and the rest is stored; an
// item with a ~1 MB auditID is stored under a bounded id.
func TestWebhookItemLargerThanTheBusIsDeadLetteredAlone(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 8<<20, natsbus.Config{URL: stockNATS(t)}, func(o *input.Env) { o.MaxEventSize = 4 << 20 })
	huge, _ := ev.Event(10)
	huge = bytes.Replace(huge, []byte(`"annotations":{`), []byte(`"annotations":{"x":"`+strings.Repeat("a", 1200000)+`",`), 1)
	hugeID, _ := ev.Event(11)
	ref := `"auditID":"` + strings.Split(string(hugeID), `"auditID":"`)[1]
	ref = ref[:strings.IndexByte(ref[len(`"auditID":"`):], '"')+len(`"auditID":"`)+1]
	hugeID = bytes.Replace(hugeID, []byte(ref), []byte(`"auditID":"`+strings.Repeat("A", 990000)+`"`), 1)
	body := eventList(ev, 0, 10, string(huge), string(hugeID))
	resp := f.post(body, token, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	if got := f.count(bus.Events); got != 11 {
		t.Errorf("%d events stored, want 11 (10 + the one with a huge auditID)", got)
	}
	dl := f.deadLetters()
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	if len(dl[0].ID) > bus.MaxIDLen || len(dl[0].Data) != bus.DeadLetterMaxData || dl[0].Header[bus.HeaderTruncated] == "" ||
		!strings.Contains(dl[0].Header[bus.HeaderReason], "larger than the bus accepts") {
		t.Errorf("dead letter: id of %d bytes, %d bytes, headers %v", len(dl[0].ID), len(dl[0].Data), dl[0].Header)
	}
	if got := testutil.ToFloat64(f.m.Bad.WithLabelValues("webhook", "too_large_for_bus")); got != 1 {
		t.Errorf("bad_lines_total{too_large_for_bus} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.m.Published.WithLabelValues("webhook")); got != 11 {
		t.Errorf("events_published_total = %v, want 11", got)
	}
}

// A 413 is kept for a body over --webhook-max-body, and says so.
func TestWebhook413NamesTheLimit(t *testing.T) {
	ev := testlog.Load(t)
	f := setup(t, 1<<20)
	resp, text := f.postRaw(eventList(ev, 0, 2000), "Authorization", "Bearer "+token)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(text, "--webhook-max-body") {
		t.Fatalf("status %d %q, want 413 naming --webhook-max-body", resp.StatusCode, text)
	}
}

// postRaw sends body with one extra header and returns the answer and its text.
func (f *fixture) postRaw(body []byte, header, value string, certs ...tls.Certificate) (*http.Response, string) {
	f.t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.pki.caPool, Certificates: certs}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp, string(text)
}

// Issue 9, defect 10: the auth scheme is case-insensitive (RFC 7235).
func TestWebhookBearerSchemeIsCaseInsensitive(t *testing.T) {
	ev := testlog.Load(t)
	f := setup(t, 1<<20)
	for i, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		if resp, text := f.postRaw(eventList(ev, i, i+1), "Authorization", scheme+" "+token); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d %q", scheme, resp.StatusCode, text)
		}
	}
	if resp, _ := f.postRaw(eventList(ev, 5, 6), "Authorization", "Basic "+token); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic scheme: status %d, want 401", resp.StatusCode)
	}
}

// clientCert issues a client certificate of the fixture's CA with these identities.
func (p *pki) clientCert(t *testing.T, cn string, dns []string, uris ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Issue 9, defect 10: with --webhook-client-allow, a certificate of the CA is accepted only
// when its CN, a DNS name or a URI is on the list.
func TestWebhookClientAllowList(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 1<<20, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()}, func(c *webhook.Config) {
		c.ClientAllow = []string{"kube-apiserver-audit", "audit.cp.example", "spiffe://cluster.local/ns/kube-system/sa/kube-apiserver"}
	})
	for i, tc := range []struct {
		name string
		cert tls.Certificate
		code int
	}{
		{"allowed CN", f.pki.clientCert(t, "kube-apiserver-audit", nil), 200},
		{"allowed DNS name", f.pki.clientCert(t, "someone", []string{"x.example", "audit.cp.example"}), 200},
		{"allowed URI", f.pki.clientCert(t, "", nil, "spiffe://cluster.local/ns/kube-system/sa/kube-apiserver"), 200},
		{"same CA, identity not listed", f.pki.clientCert(t, "kubelet", []string{"node-1"}, "spiffe://cluster.local/ns/default/sa/x"), 401},
		{"CN listed as a DNS name only", f.pki.clientCert(t, "audit.cp.example.evil", nil), 401},
		{"another CA", f.pki.otherClient, 401},
	} {
		if resp, text := f.postRaw(eventList(ev, i, i+1), "", "", tc.cert); resp.StatusCode != tc.code {
			t.Errorf("%s: status %d %q, want %d", tc.name, resp.StatusCode, text, tc.code)
		}
	}
	// The token still works beside the list.
	if resp, _ := f.postRaw(eventList(ev, 9, 10), "Authorization", "Bearer "+token); resp.StatusCode != http.StatusOK {
		t.Errorf("token with an allow-list: status %d", resp.StatusCode)
	}
}

// Issue 9, defect 7: bodies held at once are bounded by --webhook-max-inflight-bytes; a
// request beyond it gets 429 with Retry-After (the apiserver retries it), and the budget
// comes back when the request holding it ends.
func TestWebhookInflightBytesBound(t *testing.T) {
	ev := testlog.Load(t)
	f := setupWith(t, 1<<20, natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()},
		func(c *webhook.Config) { c.MaxInflightBytes = 1 << 20 })
	// A request of 1,000,000 announced bytes whose body stops arriving holds the budget.
	conn, err := tls.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(f.url, "https://"), "/audit"), &tls.Config{RootCAs: f.pki.caPool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("POST /audit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\nContent-Length: 1000000\r\n\r\n{\"kind\":")); err != nil {
		t.Fatal(err)
	}
	var resp *http.Response
	var text string
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		resp, text = f.postRaw(eventList(ev, i, i+50), "Authorization", "Bearer "+token)
		if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(text, "--webhook-max-inflight-bytes") {
		t.Fatalf("while the budget is held: status %d, Retry-After %q, %q; want 429 naming --webhook-max-inflight-bytes", resp.StatusCode, resp.Header.Get("Retry-After"), text)
	}
	conn.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		resp, _ = f.postRaw(eventList(ev, 1000, 1050), "Authorization", "Bearer "+token)
		if resp.StatusCode == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the holder left: status %d, want 200", resp.StatusCode)
	}
}

func TestWebhookInflightBytesValidate(t *testing.T) {
	p := newPKI(t)
	c := webhook.DefaultConfig()
	c.Addr, c.TLSCert, c.TLSKey, c.TokenFile, c.MaxBody, c.MaxInflightBytes = "127.0.0.1:0", p.serverCert, p.serverKey, p.serverKey, 32<<20, 1<<20
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--webhook-max-inflight-bytes") {
		t.Errorf("in-flight budget below one body: %v", err)
	}
}
