package firehose_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/envelope/envelopetest"
	"github.com/auditlens/auditlens/services/ingest/firehose"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

// realEvents are genuine audit events (the EKS envelopes around them are BUILT: no
// genuine EKS envelope is public).
func realEvents(t *testing.T) [][]byte {
	var out [][]byte
	for _, f := range []string{"eks-oomkilled-lambda-readme.jsonl", "k8s-perf-tests-gce-scale.jsonl"} {
		b, err := os.ReadFile(filepath.Join("../../../lib/auditevent/testdata/real-world", f))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			out = append(out, bytes.Clone(sc.Bytes()))
		}
	}
	return out
}

type endpoint struct {
	s      *firehose.Server
	cancel context.CancelFunc
	done   chan error
}

func startEndpoint(t *testing.T, b input.Bus) *endpoint {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("s3cret-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := firehose.DefaultConfig()
	cfg.Addr, cfg.AccessKeyFile, cfg.PublishTimeout = "127.0.0.1:0", key, 3*time.Second
	s, err := firehose.New(cfg, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &endpoint{s: s, cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-e.done; err != nil {
			t.Error(err)
		}
	})
	return e
}

type response struct {
	RequestID    string `json:"requestId"`
	Timestamp    int64  `json:"timestamp"`
	ErrorMessage string `json:"errorMessage"`
}

// post sends a delivery as Firehose does.
func post(t *testing.T, addr, key, id string, body []byte, gz bool) (int, response) {
	if gz {
		body = envelopetest.Gzip(body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", bytes.NewReader(body))
	req.Header.Set("X-Amz-Firehose-Protocol-Version", "1.0")
	req.Header.Set("X-Amz-Firehose-Request-Id", id)
	req.Header.Set("X-Amz-Firehose-Access-Key", key)
	req.Header.Set("X-Amz-Firehose-Source-Arn", "arn:aws:firehose:eu-west-1:123456789012:deliverystream/eks-audit")
	req.Header.Set("Content-Type", "application/json")
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r response
	if resp.Header.Get("Content-Type") != "application/json" || resp.ContentLength <= 0 {
		t.Errorf("response Content-Type %q, Content-Length %d", resp.Header.Get("Content-Type"), resp.ContentLength)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("response body: %v", err)
	}
	if r.RequestID != id || r.Timestamp == 0 {
		t.Errorf("response %+v does not name request %s", r, id)
	}
	return resp.StatusCode, r
}

// TestDelivery: a Firehose delivery of CloudWatch Logs subscription records (gzip, as
// CloudWatch sends them; a CONTROL_MESSAGE and an empty record among them) is answered 200
// with the request id once every audit event is on the bus, under the cluster named by the
// log group; a wrong key gets 401, a body that is no delivery 400, both in the documented
// JSON.
func TestDelivery(t *testing.T) {
	n := testnats.Start(t)
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := startEndpoint(t, b)
	events := realEvents(t)
	body := envelopetest.FirehoseBody("req-1", envelopetest.Gzip(envelopetest.Subscription(events)), envelopetest.Gzip(envelopetest.Control()), nil)
	if code, r := post(t, e.s.Addr(), "s3cret-key", "req-1", body, false); code != 200 || r.ErrorMessage != "" {
		t.Fatalf("delivery: %d %+v", code, r)
	}
	msgs := n.Messages(t, bus.Events)
	if len(msgs) != len(events) {
		t.Fatalf("%d events on the bus, want %d", len(msgs), len(events))
	}
	if got := n.Stored(t, bus.Events); got != 1 {
		t.Errorf("%d messages on the bus for one request: want its events in one batch", got)
	}
	for _, m := range msgs {
		if m.Subject != "auditlens.events."+envelopetest.Cluster || !strings.HasPrefix(m.Header.Get(jetstream.MsgIDHeader), envelopetest.Cluster+"/") {
			t.Errorf("subject %s, id %s: want the log group's cluster %s", m.Subject, m.Header.Get(jetstream.MsgIDHeader), envelopetest.Cluster)
		}
		if !bytes.Contains(m.Data, []byte(`"eks/gzip/cloudwatch-subscription"`)) {
			t.Errorf("event without the envelope annotation: %.200s", m.Data)
		}
	}
	// Firehose retries the same request (same id) when it did not see the answer: nothing doubles.
	gzBody := envelopetest.FirehoseBody("req-1", envelopetest.Gzip(envelopetest.Subscription(events)))
	if code, _ := post(t, e.s.Addr(), "s3cret-key", "req-1", gzBody, true); code != 200 {
		t.Fatalf("retry: %d", code)
	}
	if got := len(n.Messages(t, bus.Events)); got != len(events) {
		t.Fatalf("after a retry %d events, want %d", got, len(events))
	}
	if code, r := post(t, e.s.Addr(), "wrong", "req-2", body, false); code != 401 || r.ErrorMessage == "" {
		t.Fatalf("wrong key: %d %+v", code, r)
	}
	if code, r := post(t, e.s.Addr(), "s3cret-key", "req-3", []byte(`{"records":"no"}`), false); code != 400 || r.ErrorMessage == "" {
		t.Fatalf("bad body: %d %+v", code, r)
	}
	// A record that is no envelope goes to the dead-letter stream; the request still succeeds.
	bad := envelopetest.FirehoseBody("req-4", []byte("not a CloudWatch payload"))
	if code, _ := post(t, e.s.Addr(), "s3cret-key", "req-4", bad, false); code != 200 {
		t.Fatalf("bad record: %d", code)
	}
	if dl := n.Messages(t, bus.DeadLetter); len(dl) != 1 || dl[0].Header.Get(bus.HeaderSource) != "firehose:req-4" {
		t.Fatalf("dead letters: %d", len(dl))
	}
}

// TestBusOutage: while the bus is down the answer is 503 (Firehose retries); the retry
// after it is back stores every event once.
func TestBusOutage(t *testing.T) {
	n := testnats.Start(t)
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL(), StallWait: time.Second, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := startEndpoint(t, b)
	events := realEvents(t)
	body := envelopetest.FirehoseBody("req-9", envelopetest.Gzip(envelopetest.Subscription(events)))
	n.Stop()
	if code, r := post(t, e.s.Addr(), "s3cret-key", "req-9", body, false); code != 503 || r.ErrorMessage == "" {
		t.Fatalf("bus down: %d %+v", code, r)
	}
	n.Start()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _ := post(t, e.s.Addr(), "s3cret-key", "req-9", body, false)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d after the bus came back", code)
		}
		time.Sleep(200 * time.Millisecond) // Firehose's back-off, shortened
	}
	if got := len(n.Messages(t, bus.Events)); got != len(events) {
		t.Fatalf("%d events, want %d", got, len(events))
	}
}

// TestEventLargerThanTheBus: an event the bus refuses for its size (here a server whose max
// payload is below --max-event-size) is dead-lettered alone; the other events of the request
// are stored and the answer is 200, so Firehose does not retry the request for ever.
func TestEventLargerThanTheBus(t *testing.T) {
	n := testnats.StartMaxPayload(t, 256<<10)
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e := startEndpoint(t, b)
	events := realEvents(t)
	if len(events) < 3 {
		t.Fatalf("%d real events, want at least 3", len(events))
	}
	huge := append([]byte(`{"padding":"`+strings.Repeat("x", 400<<10)+`",`), events[1][1:]...)
	batch := append([][]byte{events[0], huge}, events[2:]...)
	body := envelopetest.FirehoseBody("req-big", envelopetest.Gzip(envelopetest.Subscription(batch)))
	if code, r := post(t, e.s.Addr(), "s3cret-key", "req-big", body, false); code != 200 || r.ErrorMessage != "" {
		t.Fatalf("answer %d %+v, want 200", code, r)
	}
	if got, want := len(n.Messages(t, bus.Events)), len(events)-1; got != want {
		t.Errorf("%d events stored, want the %d that fit", got, want)
	}
	dl := n.Messages(t, bus.DeadLetter)
	if len(dl) != 1 || !strings.Contains(dl[0].Header.Get(bus.HeaderReason), "larger than the bus accepts") ||
		dl[0].Header.Get(bus.HeaderTruncated) == "" || len(dl[0].Data) > bus.DeadLetterMaxData {
		t.Fatalf("dead letters: %d (want 1, truncated, naming the size)", len(dl))
	}
}
