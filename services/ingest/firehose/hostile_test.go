package firehose_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/envelope"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/services/ingest/firehose"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/metrics"
)

// startWith starts an endpoint with the given limits and budget (nil: its own) and metrics.
func startWith(t *testing.T, b input.Bus, lim envelope.Limits, budget *envelope.Budget, m *metrics.Ingest) *firehose.Server {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("s3cret-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := firehose.DefaultConfig()
	cfg.Addr, cfg.AccessKeyFile, cfg.PublishTimeout = "127.0.0.1:0", key, 30*time.Second
	s, err := firehose.New(cfg, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20, Limits: lim, Budget: budget, Metrics: m}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

func openBus(t *testing.T, n *testnats.Server) *natsbus.Bus {
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// amplified is a request of n records, each a gzip of a subscription payload of size bytes.
func amplified(id string, n, size int) []byte {
	rec := envelopetest.Gzip(envelopetest.Padded(size))
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = rec
	}
	return envelopetest.FirehoseBody(id, recs...)
}

// TestDecompressionAmplification: a small request whose records each decompress below the
// per-record cap but together to more than --managed-max-decoded-bytes is refused with 413
// (permanent: Firehose backs it up) and nothing of it is stored; one that fits is stored.
// Before the bound the whole request was decoded and stored (the review's 8.6 MiB request of
// 20 records, 51 MiB each, took ingest to 1.73 GB).
func TestDecompressionAmplification(t *testing.T) {
	n := testnats.Start(t)
	lim := envelope.Limits{MaxDecoded: 8 << 20, MaxInflight: 64<<20 + 8<<20}
	s := startWith(t, openBus(t, n), lim, nil, nil)
	body := amplified("amp-1", 20, 1<<20)
	if len(body) > 100<<10 {
		t.Fatalf("request of %d bytes: want a small one", len(body))
	}
	code, r := post(t, s.Addr(), "s3cret-key", "amp-1", body, false)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(r.ErrorMessage, "--managed-max-decoded-bytes") {
		t.Fatalf("amplified request: %d %+v, want 413 naming --managed-max-decoded-bytes", code, r)
	}
	if got := n.Count(t, bus.Events); got != 0 {
		t.Errorf("%d events stored from a refused request", got)
	}
	if code, r := post(t, s.Addr(), "s3cret-key", "amp-2", amplified("amp-2", 4, 1<<20), false); code != 200 {
		t.Fatalf("request within the limit: %d %+v", code, r)
	}
}

// TestInflightBudget: while the managed sources hold their in-flight budget, a request is
// answered 503 (Firehose retries it) without being decoded; once the budget is free again the
// same request is stored.
func TestInflightBudget(t *testing.T) {
	n := testnats.Start(t)
	lim := envelope.Limits{MaxDecoded: 8 << 20, MaxInflight: 64<<20 + 8<<20}
	budget := envelope.NewBudget(lim.MaxInflight)
	s := startWith(t, openBus(t, n), lim, budget, nil)
	body := amplified("busy-1", 4, 1<<20)
	// Another source (or request) holds all but 2 MiB: the body fits, its records do not.
	held := lim.MaxInflight - 2<<20 - int64(len(body))
	if !budget.TryTake(held) {
		t.Fatal("budget")
	}
	code, r := post(t, s.Addr(), "s3cret-key", "busy-1", body, false)
	if code != http.StatusServiceUnavailable || !strings.Contains(r.ErrorMessage, "--managed-max-inflight-bytes") {
		t.Fatalf("while the budget is held: %d %+v, want 503 naming --managed-max-inflight-bytes", code, r)
	}
	if got := budget.InUse(); got != held {
		t.Errorf("budget in use %d after the refused request, want %d (all given back)", got, held)
	}
	budget.Give(held)
	if code, r := post(t, s.Addr(), "s3cret-key", "busy-1", body, false); code != 200 {
		t.Fatalf("after the budget is free: %d %+v", code, r)
	}
	if got := n.Count(t, bus.Events); got != 1 { // four records of one event (one auditID)
		t.Errorf("%d events stored, want 1", got)
	}
	if got := budget.InUse(); got != 0 {
		t.Errorf("budget in use %d after the request, want 0", got)
	}
}

// TestClusterNamesOfEKS: one request holding records of three clusters, one with a name of
// EKS's 100 characters and one with a dot (neither a subject token): every event is stored
// (before, the whole request was answered 503 for ever, the normal event with it), each under
// a valid subject, and a consumer sees each under its cluster's own name.
func TestClusterNamesOfEKS(t *testing.T) {
	n := testnats.Start(t)
	b := openBus(t, n)
	s := startWith(t, b, envelope.Limits{}, nil, nil)
	events := realEvents(t)
	long := "e" + strings.Repeat("k", 99)
	body := envelopetest.FirehoseBody("mixed-1",
		envelopetest.Gzip(envelopetest.SubscriptionOf(long, events[:1])),
		envelopetest.Gzip(envelopetest.SubscriptionOf("normal", events[1:2])),
		envelopetest.Gzip(envelopetest.SubscriptionOf("a.b", events[2:3])))
	if code, r := post(t, s.Addr(), "s3cret-key", "mixed-1", body, false); code != 200 {
		t.Fatalf("mixed request: %d %+v, want 200", code, r)
	}
	msgs := n.Messages(t, bus.Events)
	if len(msgs) != 3 {
		t.Fatalf("%d events stored, want 3", len(msgs))
	}
	for _, m := range msgs {
		if tok := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]; bus.ValidateCluster(tok) != nil || strings.Count(m.Subject, ".") != 2 {
			t.Errorf("subject %q", m.Subject)
		}
	}
	c, err := b.Consumer(bus.Events, "names", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]bool{}
	go func() {
		_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
			mu.Lock()
			got[d.Cluster] = true
			if len(got) == 3 {
				cancel()
			}
			mu.Unlock()
			_ = d.Ack(ctx)
		})
	}()
	<-ctx.Done()
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{long, "normal", "a.b"} {
		if !got[name] {
			t.Errorf("no delivery under cluster %q (got %v)", name, got)
		}
	}
	if dl := n.Count(t, bus.DeadLetter); dl != 0 {
		t.Errorf("%d dead letters", dl)
	}
}

// TestCountedPerInput: the answers are counted under input="firehose" (not as webhook
// requests), and a request Firehose sends again under the same id (it did not see the first
// answer) is stored once and counted once in events_published_total.
func TestCountedPerInput(t *testing.T) {
	n := testnats.Start(t)
	m := metrics.New(nil)
	s := startWith(t, openBus(t, n), envelope.Limits{}, nil, m)
	events := realEvents(t)
	body := envelopetest.FirehoseBody("again-1", envelopetest.Gzip(envelopetest.Subscription(events)))
	for range 3 {
		if code, r := post(t, s.Addr(), "s3cret-key", "again-1", body, false); code != 200 {
			t.Fatalf("%d %+v", code, r)
		}
	}
	if got := testutil.ToFloat64(m.Published.WithLabelValues(firehose.Input)); got != float64(len(events)) {
		t.Errorf("events_published_total{input=firehose} = %v after the same request three times, want %d", got, len(events))
	}
	if got := n.Count(t, bus.Events); got != uint64(len(events)) {
		t.Errorf("%d events stored, want %d", got, len(events))
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues(firehose.Input, "200")); got != 3 {
		t.Errorf("requests_total{input=firehose,code=200} = %v, want 3", got)
	}
	if got := testutil.CollectAndCount(m.Requests); got != 1 {
		t.Errorf("%d series of requests_total, want only firehose's", got)
	}
}
