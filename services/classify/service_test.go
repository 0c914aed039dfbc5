package classify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

func event(auditID, stage, body string) []byte {
	return []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + auditID + `","stage":"` + stage +
		`","requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z","stageTimestamp":"2026-11-29T10:00:00.000100Z",` + body + `}`)
}

const (
	removedBody = `"requestURI":"/apis/extensions/v1beta1/namespaces/shop/ingresses","verb":"list","user":{"username":"ci"},"userAgent":"helm/v3.1.0","objectRef":{"resource":"ingresses","namespace":"shop","apiGroup":"extensions","apiVersion":"v1beta1"},"responseStatus":{"code":404}`
	tokenBody   = `"requestURI":"/api/v1/namespaces/a/pods","verb":"list","user":{"username":"system:serviceaccount:a:b"},"objectRef":{"resource":"pods","namespace":"a","apiVersion":"v1"},"annotations":{"authentication.k8s.io/legacy-token":"system:serviceaccount:a:b"}`
	cleanBody   = `"requestURI":"/api/v1/namespaces/a/pods","verb":"list","user":{"username":"admin"},"objectRef":{"resource":"pods","namespace":"a","apiVersion":"v1"}`
)

func openNATS(t *testing.T) *natsbus.Bus {
	t.Helper()
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded NATS: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// collect reads stream s as group until want messages arrived, then for settle more to
// catch extras.
func collect(t *testing.T, b bus.Bus, s bus.Stream, want int, settle time.Duration) []*bus.Delivery {
	t.Helper()
	c, err := b.Consumer(s, "test-"+string(s), bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound(30*time.Second))
	defer cancel()
	var mu sync.Mutex
	var got []*bus.Delivery
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
			_ = d.Ack(ctx)
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
		})
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(settle)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return got
}

// TestServiceThroughEmbeddedNATS publishes events (three stages of one removed-API request,
// a legacy-token request, a clean one, a bad one) and reads findings and dead letters back.
func TestServiceThroughEmbeddedNATS(t *testing.T) {
	b := openNATS(t)
	reg := prometheus.NewRegistry()
	svc, err := newService(configWith(func(c *Config) { c.Workers = 1; c.BatchWait = 5 * time.Millisecond }), daemon.Deps{Bus: b, Cluster: "default", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()

	msgs := []bus.Message{
		{Stream: bus.Events, Cluster: "prod", ID: "r1/RequestReceived", Data: event("r1", "RequestReceived", removedBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "r1/ResponseStarted", Data: event("r1", "ResponseStarted", removedBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "r1/ResponseComplete", Data: event("r1", "ResponseComplete", removedBody),
			Header: map[string]string{bus.HeaderNode: "cp-1"}},
		{Stream: bus.Events, Cluster: "prod", ID: "t1/ResponseComplete", Data: event("t1", "ResponseComplete", tokenBody)},
		{Stream: bus.Events, Cluster: "staging", ID: "c1/ResponseComplete", Data: event("c1", "ResponseComplete", cleanBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "bad-1", Data: []byte(`{"this is":"not an audit event"}`),
			Header: map[string]string{bus.HeaderSource: "/var/log/audit.log:42"}},
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "all events classified", func() bool {
		return testutil.ToFloat64(svc.met.events.WithLabelValues("ok"))+testutil.ToFloat64(svc.met.events.WithLabelValues("bad")) >= 6
	})
	// The same request redelivered later (after a restart, say) adds nothing; another request
	// sending the same Audit-ID five minutes later is a finding of its own.
	reused := bytes.ReplaceAll(event("r1", "ResponseComplete", removedBody), []byte("2026-11-29T10:00:00"), []byte("2026-11-29T10:05:00"))
	if err := b.Publish(context.Background(), bus.Message{Stream: bus.Events, Cluster: "prod", ID: "r1/ResponseComplete-again", Data: event("r1", "ResponseComplete", removedBody)},
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "r1-reused/ResponseComplete", Data: reused}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the repeat classified", func() bool {
		return testutil.ToFloat64(svc.met.events.WithLabelValues("ok")) >= 7
	})

	ids := map[string]*auditlensv1.Finding{}
	for _, f := range findingsIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
		id := dedup.Key(f.Cluster, f.AuditId, f.RuleId, f.RequestReceived)
		if _, dup := ids[id]; dup {
			t.Errorf("finding %s delivered twice", id)
		}
		ids[id] = f
	}
	at10, at1005 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Unix(), time.Date(2026, 11, 29, 10, 5, 0, 0, time.UTC).Unix()
	first, second := dedup.Key("prod", "r1", "removed-api", at10), dedup.Key("prod", "r1", "removed-api", at1005)
	if len(ids) != 3 || ids[first] == nil || ids[second] == nil || ids[dedup.Key("prod", "t1", "legacy-sa-token", at10)] == nil {
		t.Fatalf("findings %v, want %s, %s and prod/t1/legacy-sa-token once each", keys(ids), first, second)
	}
	f := ids[first]
	if f.RemovedIn != "1.22" || f.Replacement != "networking.k8s.io/v1" || f.AuditId != "r1" || f.Username != "ci" || f.ResponseCode != 404 ||
		f.Stage != "RequestReceived" || f.EventTime.AsTime().Format(time.RFC3339) != "2026-11-29T10:00:00Z" || !strings.Contains(f.Message, "networking.k8s.io/v1") {
		t.Errorf("removed-api finding %+v", f)
	}
	if got := testutil.ToFloat64(svc.met.duplicates); got != 3 {
		t.Errorf("duplicates suppressed %v, want 3 (two later stages and one redelivery)", got)
	}
	if got := testutil.ToFloat64(svc.met.findings.WithLabelValues("removed-api")); got != 2 {
		t.Errorf("findings_total{rule=removed-api} = %v", got)
	}

	dead := collect(t, b, bus.DeadLetter, 1, 100*time.Millisecond)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if r := dead[0].Header[bus.HeaderReason]; !strings.Contains(r, "not an audit event") {
		t.Errorf("dead letter reason %q", r)
	}
	if src := dead[0].Header[bus.HeaderSource]; !strings.HasPrefix(src, "/var/log/audit.log:42 (AUDIT_EVENTS:") {
		t.Errorf("dead letter source %q", src)
	}
	if testutil.ToFloat64(svc.met.parseErrors.WithLabelValues(reason.NotAuditEvent)) != 1 {
		t.Error("parse error not counted")
	}
	if err := svc.Ready(); err != nil {
		t.Errorf("ready: %v", err)
	}
	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(testkit.Bound(30 * time.Second)):
		t.Fatal("Run did not return after cancel")
	}
}

// TestReplicasShareTheWork runs two services on one group: every event is classified once.
func TestReplicasShareTheWork(t *testing.T) {
	b := openNATS(t)
	var svcs []*service
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		s, err := newService(configWith(func(c *Config) { c.BatchWait = time.Millisecond; c.BatchSize = 8 }), daemon.Deps{Bus: b, Cluster: "default", Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, s)
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
	var msgs []bus.Message
	for i := range 400 {
		id := "e" + itoa(i)
		msgs = append(msgs, bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: event(id, "ResponseComplete", removedBody)})
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	total := func() float64 {
		n := 0.0
		for _, s := range svcs {
			n += testutil.ToFloat64(s.met.events.WithLabelValues("ok"))
		}
		return n
	}
	testkit.Eventually(t, 20*time.Second, "400 events classified", func() bool { return total() >= 400 })
	time.Sleep(200 * time.Millisecond)
	if n := total(); n != 400 {
		t.Errorf("%v classifications of 400 events", n)
	}
	cancel()
	wg.Wait()
	got := map[string]bool{}
	for _, f := range findingsIn(t, collect(t, b, bus.Findings, 1, 500*time.Millisecond)) {
		got[f.AuditId] = true
	}
	if len(got) != 400 {
		t.Errorf("%d distinct findings, want 400", len(got))
	}
}

// findingsIn decodes the findings of FindingBatch messages, checking each message's header,
// id and cluster; it skips heartbeats.
func findingsIn(t *testing.T, ds []*bus.Delivery) []*auditlensv1.Finding {
	t.Helper()
	var out []*auditlensv1.Finding
	for _, d := range ds {
		if d.Header[auditlensv1.MessageTypeHeader] == auditlensv1.HeartbeatMessageType {
			continue
		}
		if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.FindingBatchMessageType || !strings.HasPrefix(d.ID, d.Cluster+"/batch/") {
			t.Errorf("message %s: headers %v", d.ID, d.Header)
		}
		raw, _, err := eventbatch.Decompress(d.Header, d.Data, nil)
		if err != nil {
			t.Fatalf("message %s: %v", d.ID, err)
		}
		var batch auditlensv1.FindingBatch
		if err := proto.Unmarshal(raw, &batch); err != nil {
			t.Fatalf("message %s: %v", d.ID, err)
		}
		for _, f := range batch.Findings {
			if f.Cluster != d.Cluster {
				t.Errorf("message %s of cluster %q holds a finding of %q", d.ID, d.Cluster, f.Cluster)
			}
		}
		out = append(out, batch.Findings...)
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	s := ""
	for ; i > 0; i /= 10 {
		s = string(rune('0'+i%10)) + s
	}
	return s
}

func keys(m map[string]*auditlensv1.Finding) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// fakeBus delivers given events and fails publishes while failing is set.
type fakeBus struct {
	mu        sync.Mutex
	failing   bool
	published []bus.Message
	events    []*bus.Delivery
}

type fakeAcker struct {
	mu    *sync.Mutex
	state *string
}

func (a fakeAcker) Ack(context.Context) error { a.set("ack"); return nil }
func (a fakeAcker) Nak(time.Duration) error   { a.set("nak"); return nil }
func (a fakeAcker) Term(string) error         { a.set("term"); return nil }
func (a fakeAcker) set(s string)              { a.mu.Lock(); *a.state = s; a.mu.Unlock() }
func (b *fakeBus) Ready() error               { return nil }
func (b *fakeBus) Close() error               { return nil }
func (b *fakeBus) Consume(ctx context.Context, h bus.Handler) error {
	for _, d := range b.events {
		h(ctx, d)
	}
	<-ctx.Done()
	return nil
}
func (b *fakeBus) Consumer(bus.Stream, string, bus.ConsumerOptions) (bus.Consumer, error) {
	return b, nil
}
func (b *fakeBus) Publish(_ context.Context, msgs ...bus.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failing {
		return errors.New("bus down")
	}
	b.published = append(b.published, msgs...)
	return nil
}

// TestEventsAreAckedOnlyAfterTheirFindingsAreStored: a failed publish naks the batch, so
// the events come back, and the finding is not remembered as emitted.
func TestEventsAreAckedOnlyAfterTheirFindingsAreStored(t *testing.T) {
	var mu sync.Mutex
	states := make([]string, 2)
	fb := &fakeBus{failing: true}
	for i, id := range []string{"x1", "x2"} {
		d := &bus.Delivery{Acker: fakeAcker{&mu, &states[i]}, Delivered: 1}
		d.Stream, d.Cluster, d.ID, d.Data = bus.Events, "prod", id, event(id, "ResponseComplete", removedBody)
		fb.events = append(fb.events, d)
	}
	svc, err := newService(configWith(func(c *Config) { c.BatchWait = 10 * time.Millisecond }), daemon.Deps{Bus: fb, Cluster: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	testkit.Eventually(t, 20*time.Second, "both events nak'ed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return states[0] == "nak" && states[1] == "nak"
	})
	cancel()
	<-done
	// The key of x1's finding: its receipt time is part of it (event's requestReceivedTimestamp).
	received := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Unix()
	if svc.seen.Seen(dedup.Key("prod", "x1", "removed-api", received)) {
		t.Fatal("a finding that was never stored is remembered as emitted")
	}
	// The bus is back: redelivered, the events are classified, published, then acked.
	fb.failing = false
	for i := range fb.events {
		fb.events[i].Delivered = 2
	}
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	testkit.Eventually(t, 20*time.Second, "both events acked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return states[0] == "ack" && states[1] == "ack"
	})
	cancel()
	<-done
	// Two workers: the two findings may be published in one message or two, in either order.
	var ds []*bus.Delivery
	for _, m := range fb.published {
		ds = append(ds, &bus.Delivery{Message: m})
	}
	ids := map[string]bool{}
	for _, f := range findingsIn(t, ds) {
		ids[f.Cluster+"/"+f.AuditId+"/"+f.RuleId] = true
	}
	if len(ids) != 2 || !ids["prod/x1/removed-api"] || !ids["prod/x2/removed-api"] {
		t.Fatalf("published %d messages with findings %v, want prod/x1 and prod/x2 removed-api", len(fb.published), ids)
	}
	if !svc.seen.Seen(dedup.Key("prod", "x1", "removed-api", received)) {
		t.Error("the stored finding of x1 is not remembered under its key")
	}
}

func TestConfigValidate(t *testing.T) {
	c := configWith(func(c *Config) { c.RulesFiles = []string{"/no/such/rules.yaml"} })
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--rules-file") {
		t.Errorf("missing rules file: %v", err)
	}
	c = configWith(func(c *Config) { c.BatchSize = 10; c.MaxUnacked = 5 })
	if err := c.Validate(); err == nil {
		t.Error("batch larger than max unacked accepted")
	}
	if _, err := New(DefaultConfig(), daemon.Deps{}); err == nil {
		t.Error("New without a bus accepted")
	}
}

// panicky is the real engine, except that classifying the event with auditID poison panics,
// as a rule meeting input it was not written for would.
type panicky struct{ classifier }

func (p panicky) Classify(ev *auditevent.Event, dst []rules.Match) []rules.Match {
	if ev.AuditID == "poison" {
		var m map[string]int
		m["boom"]++ //nolint:staticcheck // nil map write on purpose: a genuine runtime panic
	}
	return p.classifier.Classify(ev, dst)
}

// A panic while classifying one event dead-letters that event, counted, and the service
// goes on with the others (before, the panic ended the process, and the redelivered event
// ended it again at every restart).
func TestPanicDeadLettersTheEventAndGoesOn(t *testing.T) {
	b := openNATS(t)
	reg := prometheus.NewRegistry()
	svc, err := newService(configWith(func(c *Config) { c.Workers = 1; c.BatchWait = 5 * time.Millisecond }), daemon.Deps{Bus: b, Cluster: "default", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	svc.engine = panicky{svc.engine}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()
	msgs := []bus.Message{
		{Stream: bus.Events, Cluster: "prod", ID: "r1/ResponseComplete", Data: event("r1", "ResponseComplete", removedBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "poison/ResponseComplete", Data: event("poison", "ResponseComplete", removedBody)},
		{Stream: bus.Events, Cluster: "prod", ID: "t1/ResponseComplete", Data: event("t1", "ResponseComplete", tokenBody)},
	}
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "all events settled", func() bool {
		return testutil.ToFloat64(svc.met.events.WithLabelValues("ok"))+testutil.ToFloat64(svc.met.events.WithLabelValues("bad")) >= 3
	})
	if got := testutil.ToFloat64(svc.met.panics); got != 1 {
		t.Errorf("panics_total %v, want 1", got)
	}
	var ids []string
	for _, f := range findingsIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
		ids = append(ids, f.AuditId+"/"+f.RuleId)
	}
	if strings.Join(ids, " ") != "r1/removed-api t1/legacy-sa-token" {
		t.Errorf("findings %v, want those of r1 and t1 only", ids)
	}
	dead := collect(t, b, bus.DeadLetter, 1, 100*time.Millisecond)
	if len(dead) != 1 || dead[0].ID != "classify/poison/ResponseComplete" || !strings.Contains(dead[0].Header[bus.HeaderReason], "panic") {
		t.Fatalf("dead letters %+v, want the poison event with a panic reason", dead)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// configWith is DefaultConfig changed by set.
func configWith(set func(*Config)) Config {
	c := DefaultConfig()
	set(&c)
	return c
}

// TestSightingsThroughEmbeddedNATS: a kubelet polling all day is one version-skew finding per
// day, however many requests it sends, including those redelivered after a restart.
func TestSightingsThroughEmbeddedNATS(t *testing.T) {
	b := openNATS(t)
	reg := prometheus.NewRegistry()
	svc, err := newService(configWith(func(c *Config) { c.Workers = 2; c.BatchWait = 5 * time.Millisecond }), daemon.Deps{Bus: b, Cluster: "default", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()
	// Run's last heartbeat flush publishes after the consumer stops: wait for it, before the bus
	// closes (goleak found it still waiting on the bus in a CI run).
	defer func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	kubelet := func(id, at string) bus.Message {
		data := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"` + id + `","stage":"ResponseComplete",` +
			`"requestReceivedTimestamp":"` + at + `","verb":"update","requestURI":"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",` +
			`"user":{"username":"system:node:n1","groups":["system:nodes"]},"userAgent":"kubelet/v1.33.4 (linux/amd64) kubernetes/74cdb42",` +
			`"objectRef":{"resource":"leases","namespace":"kube-node-lease","name":"n1","apiGroup":"coordination.k8s.io","apiVersion":"v1"},"responseStatus":{"code":200}}`
		return bus.Message{Stream: bus.Events, Cluster: "prod", ID: id, Data: []byte(data)}
	}
	var msgs []bus.Message
	for i := range 200 {
		msgs = append(msgs, kubelet("k"+itoa(i), fmt.Sprintf("2026-12-05T%02d:%02d:00Z", i/60, i%60)))
	}
	msgs = append(msgs, kubelet("next-day", "2026-12-06T00:00:10Z"), kubelet("k7-again", "2026-12-05T00:07:00Z"))
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "all events classified", func() bool {
		return testutil.ToFloat64(svc.met.events.WithLabelValues("ok")) >= float64(len(msgs))
	})
	// Two workers may both build the day's first sighting before either is remembered (as
	// two stages of one request may): the same key, which the store keeps once. Few repeats
	// reach the bus, and never a second key for a day.
	keys := map[string]map[string]bool{}
	n := 0
	for _, f := range findingsIn(t, collect(t, b, bus.Findings, 2, 300*time.Millisecond)) {
		if f.RuleId != rules.VersionSkew || f.Resource != "kubelet 1.33" || f.RemovedIn != "1.37" {
			t.Errorf("finding %s %s %s removed in %s", f.RuleId, f.AuditId, f.Resource, f.RemovedIn)
		}
		day := f.EventTime.AsTime().Format(time.DateOnly)
		if keys[day] == nil {
			keys[day] = map[string]bool{}
		}
		keys[day][f.AuditId] = true
		n++
	}
	if len(keys["2026-12-05"]) != 1 || len(keys["2026-12-06"]) != 1 || len(keys) != 2 {
		t.Errorf("version-skew finding keys by day %v, want one on each of 2026-12-05 and 2026-12-06", keys)
	}
	if n > 4 {
		t.Errorf("%d version-skew findings published for 202 requests on 2 days, want a few at most", n)
	}
}
