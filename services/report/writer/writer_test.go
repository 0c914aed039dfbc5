package writer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/reason"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestMain(m *testing.M) { chtest.Main(m) }

func openBus(t testing.TB) *natsbus.Bus {
	t.Helper()
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func testConfig() Config {
	c := DefaultConfig()
	c.BatchSize, c.MaxWait, c.RetryMin, c.RetryMax = 500, 50*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	c.AckWait, c.DrainTimeout = 30*time.Second, 10*time.Second
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

var t0 = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

func finding(cluster, auditID, rule string) *auditlensv1.Finding {
	return &auditlensv1.Finding{RuleId: rule, Cluster: cluster, AuditId: auditID,
		EventTime: timestamppb.New(t0), Username: "system:serviceaccount:kube-system:old-controller",
		UserAgent: "old-controller/v0.1", ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses",
		RemovedIn: "1.22", Severity: auditlensv1.Severity_SEVERITY_CRITICAL}
}

// findingMsg is one Finding per message, the format before batches.
func findingMsg(cluster, auditID, rule string, msgID string) bus.Message {
	data, err := proto.Marshal(finding(cluster, auditID, rule))
	if err != nil {
		panic(err)
	}
	return bus.Message{Stream: bus.Findings, Cluster: cluster, ID: msgID, Data: data}
}

func messages(prefix string, n int) []bus.Message {
	out := make([]bus.Message, n)
	for i := range out {
		out[i] = findingMsg("prod", fmt.Sprintf("%s-%d", prefix, i), "removed-api", fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// batchMsg packs findings into one FindingBatch message, as classify publishes them.
func batchMsg(cluster, msgID string, fs ...*auditlensv1.Finding) bus.Message {
	data, err := proto.Marshal(&auditlensv1.FindingBatch{Findings: fs})
	if err != nil {
		panic(err)
	}
	return bus.Message{Stream: bus.Findings, Cluster: cluster, ID: msgID, Data: data,
		Header: map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.FindingBatchMessageType}}
}

// compressed is msgs with each payload compressed as classify's
// --classify-findings-compression does.
func compressed(compression string, msgs []bus.Message) []bus.Message {
	out := make([]bus.Message, len(msgs))
	for i, m := range msgs {
		m.Data, _ = eventbatch.Compress(compression, m.Data, nil)
		m.Header = map[string]string{auditlensv1.MessageTypeHeader: auditlensv1.FindingBatchMessageType, eventbatch.HeaderEncoding: compression}
		out[i] = m
	}
	return out
}

// batches is n findings (audit ids prefix-0 ...) in messages of perMsg findings.
func batches(prefix string, n, perMsg int) []bus.Message {
	var out []bus.Message
	for i := 0; i < n; i += perMsg {
		var fs []*auditlensv1.Finding
		for j := i; j < min(i+perMsg, n); j++ {
			fs = append(fs, finding("prod", fmt.Sprintf("%s-%d", prefix, j), "removed-api"))
		}
		out = append(out, batchMsg("prod", fmt.Sprintf("%s-batch-%d-%d", prefix, i, perMsg), fs...))
	}
	return out
}

// startWriter runs a writer until the test ends; stop cancels it and waits for Run.
func startWriter(t *testing.T, c Config, st *store.Store, b bus.Bus) (w *Writer, stop func() error) {
	t.Helper()
	w, err := New(c, st, b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.now = testkit.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				t.Error("writer did not stop within 60s")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return w, stop
}

// distinct counts findings the way every query must: by identity.
func distinct(t testing.TB, st *store.Store) uint64 {
	t.Helper()
	var n uint64
	if err := st.DB().QueryRow("SELECT uniqExact(cluster, rule_id, audit_id) FROM findings").Scan(&n); err != nil {
		return 0 // the server may be down in the middle of a test
	}
	return n
}

func TestWritesEachFindingOnce(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		w, _ := startWriter(t, testConfig(), st, b)
		ctx := context.Background()
		msgs := messages("a", 1200)
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		// The same findings again under new message ids (a classify restart re-reading its
		// input): the bus cannot de-duplicate them, the store must not count them twice.
		again := messages("a", 300)
		for i := range again {
			again[i].ID = "replay-" + again[i].ID
		}
		if err := b.Publish(ctx, again...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "1500 writes", func() bool { return testutil.ToFloat64(w.m.written) >= 1500 })
		if n := distinct(t, st); n != 1200 {
			t.Errorf("%d distinct findings, want 1200", n)
		}
		var rollup uint64
		if err := st.DB().QueryRow("SELECT toUInt64(sum(findings)) FROM finding_days_current WHERE rule_id = 'removed-api'").Scan(&rollup); err != nil {
			t.Fatal(err)
		}
		if rollup != 1200 {
			t.Errorf("finding_days_current counts %d, want 1200", rollup)
		}
		if err := w.Ready(); err != nil {
			t.Errorf("not ready after writing: %v", err)
		}
	})
}

// TestBatchMessagesCountOnce: findings arrive in FindingBatch messages, uncompressed and
// compressed (zstd, S2), beside single-Finding messages (a stream written before and after
// an upgrade of classify); a classify restart re-publishes the same findings in batches of
// another composition (new message ids, which the bus cannot de-duplicate): ClickHouse and
// its rollups still count each finding once.
func TestBatchMessagesCountOnce(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		b := openBus(t)
		c := testConfig()
		c.BatchSize = 250 // smaller than some messages: a message is never split between inserts
		w, _ := startWriter(t, c, st, b)
		ctx := context.Background()
		msgs := append(messages("b", 105), batches("b", 1000, 300)[1:]...)                        // b-0..b-104 single, b-300.. in batches
		msgs = append(msgs, compressed(eventbatch.CompressionZstd, batches("b", 300, 7)[15:])...) // b-105..b-299 in batches of 7
		if err := b.Publish(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "1000 distinct findings", func() bool { return distinct(t, st) == 1000 })
		// The restart: the same findings again, composed differently.
		if err := b.Publish(ctx, compressed(eventbatch.CompressionS2, batches("b", 1000, 64))...); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, time.Minute, "the replay written", func() bool { return testutil.ToFloat64(w.m.written) >= 2000 })
		if n := distinct(t, st); n != 1000 {
			t.Errorf("%d distinct findings, want 1000", n)
		}
		for _, q := range []string{
			"SELECT toUInt64(sum(findings)) FROM finding_days_current WHERE rule_id = 'removed-api'",
			"SELECT toUInt64(sum(findings)) FROM finding_days_current WHERE rule_id = 'removed-api' AND api_version = 'v1beta1'",
			"SELECT uniqExactMerge(findings) FROM finding_hour_states WHERE rule_id = 'removed-api'",
		} {
			var n uint64
			if err := st.DB().QueryRow(q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1000 {
				t.Errorf("%s: %d, want 1000", q, n)
			}
		}
	})
}

// TestBadFindingsInABatch: undecodable findings and findings without identity inside a batch
// go to the dead-letter stream one by one (id "report/<message id>#<index>"); the rest of the
// batch is written and the message acknowledged. A batch that is not protobuf at all is
// dead-lettered whole.
func TestBadFindingsInABatch(t *testing.T) {
	_, st := chtest.ServerStore(t)
	b := openBus(t)
	c := testConfig()
	w, stop := startWriter(t, c, st, b)
	ctx := context.Background()
	mixed := batchMsg("prod", "mixed", finding("prod", "ok-1", "psp"), finding("prod", "", "psp"), finding("prod", "ok-2", "psp"))
	// Corrupt the third finding by hand: field 1 entries are (0x0a, length, finding bytes).
	good, err := proto.Marshal(finding("prod", "ok-3", "psp"))
	if err != nil {
		t.Fatal(err)
	}
	mixed.Data = append(mixed.Data, 0x0a, 4, 0x0a, 0x10, 'x', 'y') // rule_id claims 16 bytes, has 2
	mixed.Data = protowire.AppendBytes(protowire.AppendTag(mixed.Data, 1, protowire.BytesType), good)
	garbage := batchMsg("prod", "garbage")
	garbage.Data = []byte("\x0a\xff\xff\xff\xff not protobuf")
	broken := compressed(eventbatch.CompressionS2, []bus.Message{batchMsg("prod", "broken", finding("prod", "lost", "psp"))})[0]
	broken.Data = broken.Data[:len(broken.Data)-3] // S2 cut short
	if err := b.Publish(ctx, mixed, garbage, broken); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "three good findings", func() bool { return distinct(t, st) == 3 })
	testkit.Eventually(t, time.Minute, "four dead letters", func() bool { return testutil.ToFloat64(w.m.deadLettered) == 4 })
	if n := testutil.ToFloat64(w.m.invalid); n != 4 {
		t.Errorf("%v invalid, want 4", n)
	}
	dl := deadLetters(t, b, 4)
	if r := dl["report/broken"]; !strings.Contains(r, "undecodable finding batch") {
		t.Errorf("broken compression: %q", r)
	}
	if r := dl["report/mixed#1"]; !strings.Contains(r, "without cluster, audit_id or rule_id") {
		t.Errorf("finding 1 (no audit id): %q", r)
	}
	if r := dl["report/mixed#3"]; !strings.Contains(r, "undecodable finding") {
		t.Errorf("finding 3 (truncated): %q", r)
	}
	if r := dl["report/garbage"]; !strings.Contains(r, "undecodable finding batch") {
		t.Errorf("garbage batch: %q", r)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Both messages were settled: a new writer in the same group receives nothing.
	w2, stop2 := startWriter(t, c, st, b)
	time.Sleep(300 * time.Millisecond) // nothing to wait for: absence of deliveries
	_ = stop2()
	if n := testutil.ToFloat64(w2.m.written) + testutil.ToFloat64(w2.m.invalid); n != 0 {
		t.Errorf("a second writer received %v findings: the batches were not settled", n)
	}
}

// deadLetters reads n dead letters and returns their reasons by message id.
func deadLetters(t *testing.T, b bus.Bus, n int) map[string]string {
	t.Helper()
	cons, err := b.Consumer(bus.DeadLetter, "test-deadletter", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	reasons := map[string]string{}
	go func() {
		_ = cons.Consume(ctx, func(_ context.Context, d *bus.Delivery) {
			mu.Lock()
			reasons[d.ID] = d.Header[bus.HeaderReason]
			mu.Unlock()
			_ = d.Ack(ctx)
		})
	}()
	testkit.Eventually(t, time.Minute, fmt.Sprintf("%d dead letters", n), func() bool { mu.Lock(); defer mu.Unlock(); return len(reasons) >= n })
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(reasons)
}

func TestClickHouseDownLosesNothing(t *testing.T) {
	srv, st := chtest.ServerStore(t)
	b := openBus(t)
	c := testConfig()
	w, stop := startWriter(t, c, st, b)
	ctx := context.Background()
	if err := b.Publish(ctx, messages("before", 1000)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the first findings", func() bool { return distinct(t, st) == 1000 })

	srv.Stop()
	// Batch messages too: each is acknowledged only once all its findings are committed.
	if err := b.Publish(ctx, batches("during", 2000, 130)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "failed writes while ClickHouse is down", func() bool { return testutil.ToFloat64(w.m.writeErrors) >= 3 })
	if w.Ready() == nil {
		t.Error("ready while ClickHouse is down")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, messages("after", 1000)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "every finding after the restart", func() bool { return distinct(t, st) == 4000 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.m.unwritten); got != 0 {
		t.Errorf("%v findings unwritten at shutdown", got)
	}
	// Everything was acknowledged: a new writer in the same group receives nothing.
	_, st2 := chtest.ServerStore(t)
	w2, stop2 := startWriter(t, c, st2, b)
	time.Sleep(300 * time.Millisecond) // nothing to wait for: absence of deliveries
	_ = stop2()
	if n := testutil.ToFloat64(w2.m.written); n != 0 {
		t.Errorf("a second writer received %v findings: acknowledgements were lost", n)
	}
}

// An outage many times the ack wait long (here 12 waits of 1s; minutes in production, where the
// wait is 10s) redelivers nothing: the running writer keeps what it holds (the bus tells the
// server it is still in progress), writes each finding once after ClickHouse is back, and
// loses none.
func TestLongOutageRedeliversNothing(t *testing.T) {
	srv, st := chtest.ServerStore(t)
	b := openBus(t)
	c := testConfig()
	c.AckWait = time.Second
	w, stop := startWriter(t, c, st, b)
	ctx := context.Background()
	if err := b.Publish(ctx, messages("before", 500)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the first findings", func() bool { return distinct(t, st) == 500 })

	srv.Stop()
	down := time.Now()
	if err := b.Publish(ctx, batches("during", 1500, 100)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "failed writes while ClickHouse is down", func() bool { return testutil.ToFloat64(w.m.writeErrors) >= 3 })
	time.Sleep(12*c.AckWait - time.Since(down)) // the outage itself
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "every finding after the outage", func() bool { return distinct(t, st) == 2000 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(w.m.written); n != 2000 {
		t.Errorf("%v findings written for 2000: redelivered during the outage", n)
	}
	var rows uint64
	if err := st.DB().QueryRow("SELECT count() FROM auditlens.findings").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2000 {
		t.Errorf("%d rows for 2000 findings", rows)
	}
}

func TestShutdownDrainsTheBatch(t *testing.T) {
	_, st := chtest.ServerStore(t)
	b := openBus(t)
	c := testConfig()
	c.BatchSize = 100000
	c.MaxWait = time.Hour // only shutdown writes
	w, stop := startWriter(t, c, st, b)
	if err := b.Publish(context.Background(), messages("held", 700)...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "700 received findings", func() bool { return testutil.ToFloat64(w.m.pending) == 700 })
	if n := distinct(t, st); n != 0 {
		t.Fatalf("%d findings written before the batch filled", n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := distinct(t, st); n != 700 {
		t.Errorf("%d findings after shutdown, want 700", n)
	}
}

func TestInvalidMessagesGoToDeadLetter(t *testing.T) {
	_, st := chtest.ServerStore(t)
	b := openBus(t)
	w, _ := startWriter(t, testConfig(), st, b)
	ctx := context.Background()
	noID := findingMsg("prod", "", "psp", "no-audit-id")
	huge := findingMsg("prod", "huge-1", "psp", "huge")
	huge.Data = append(huge.Data, make([]byte, 2<<20)...) // over --report-max-finding-bytes (1 MiB)
	bad := []bus.Message{
		{Stream: bus.Findings, Cluster: "prod", ID: "garbage", Data: []byte("\xff\xff\xff not protobuf")},
		noID,
		huge,
		findingMsg("prod", "good-1", "psp", "good-1"),
	}
	if err := b.Publish(ctx, bad...); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, "the good finding", func() bool { return distinct(t, st) == 1 })
	testkit.Eventually(t, time.Minute, "three invalid messages", func() bool { return testutil.ToFloat64(w.m.deadLettered) == 3 })

	cons, err := b.Consumer(bus.DeadLetter, "test-deadletter", bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	reasons := map[string]string{}
	sizes := map[string]int{}
	labels := map[string]string{}
	go func() {
		_ = cons.Consume(cctx, func(_ context.Context, d *bus.Delivery) {
			mu.Lock()
			reasons[d.ID] = d.Header[bus.HeaderReason]
			sizes[d.ID] = len(d.Data)
			labels[d.ID] = d.Header[bus.HeaderReasonLabel]
			mu.Unlock()
			_ = d.Ack(cctx)
		})
	}()
	testkit.Eventually(t, time.Minute, "three dead letters", func() bool { mu.Lock(); defer mu.Unlock(); return len(reasons) == 3 })
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if r := reasons["report/garbage"]; r == "" {
		t.Errorf("garbage not dead-lettered with a reason: %v", reasons)
	}
	if r, n := reasons["report/huge"], sizes["report/huge"]; !strings.Contains(r, "exceeds") || n != bus.DeadLetterMaxData {
		t.Errorf("huge finding: dead letter of %d bytes, reason %q; want its first %d bytes", n, r, bus.DeadLetterMaxData)
	}
	if r := reasons["report/no-audit-id"]; r == "" {
		t.Errorf("finding without audit_id not dead-lettered: %v", reasons)
	}
	if l := labels["report/huge"]; l != reason.TooLarge {
		t.Errorf("huge finding: reason label %q, want %q", l, reason.TooLarge)
	}
}
