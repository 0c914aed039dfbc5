package classify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/bus/kafkabus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// TestEventBatchIsTheProtobufMessage pins lib/bus/eventbatch's hand-built wire format to
// proto/auditlens/v1/event.proto: a batch it packs is an auditlens.v1.EventBatch.
func TestEventBatchIsTheProtobufMessage(t *testing.T) {
	if eventbatch.MessageType != auditlensv1.EventBatchMessageType || eventbatch.HeaderMessageType != auditlensv1.MessageTypeHeader {
		t.Fatalf("eventbatch says %s: %s, proto says %s: %s", eventbatch.HeaderMessageType, eventbatch.MessageType,
			auditlensv1.MessageTypeHeader, auditlensv1.EventBatchMessageType)
	}
	cfg := eventbatch.DefaultConfig()
	cfg.Compression = eventbatch.CompressionNone
	p := eventbatch.NewPacker(cfg, "prod", "prod/x", eventbatch.ByRange, nil)
	evs := [][]byte{event("a", "ResponseComplete", cleanBody), event("b", "ResponseComplete", tokenBody)}
	var msgs []bus.Message
	for i, ev := range evs {
		msgs = p.Add(msgs, ev, fmt.Sprint(i))
	}
	msgs = p.Flush(msgs)
	var got auditlensv1.EventBatch
	if err := proto.Unmarshal(msgs[0].Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 2 || string(got.Events[1]) != string(evs[1]) {
		t.Fatalf("EventBatch holds %d events", len(got.Events))
	}
}

// mixedMessages is what classify meets during an upgrade: an EventBatch (with a poisoned
// event in the middle) from a new ingest and single-event messages from an old one.
func mixedMessages(t *testing.T) []bus.Message {
	t.Helper()
	p := eventbatch.NewPacker(eventbatch.DefaultConfig(), "prod", "prod/file/fp", eventbatch.ByRange, map[string]string{bus.HeaderNode: "cp-1"})
	var msgs []bus.Message
	for i, ev := range [][]byte{
		event("b1", "ResponseComplete", removedBody),
		[]byte(`{"kind":"Pod","poisoned":true}`),
		event("b2", "ResponseComplete", tokenBody),
		event("b3", "ResponseComplete", cleanBody),
	} {
		msgs = p.Add(msgs, ev, fmt.Sprint(100*i))
	}
	msgs = p.Flush(msgs)
	if len(msgs) != 1 || !eventbatch.IsBatch(msgs[0].Header) {
		t.Fatalf("want one batch message, got %d", len(msgs))
	}
	return append(msgs,
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "prod/s1/ResponseComplete", Data: event("s1", "ResponseComplete", removedBody)},
		bus.Message{Stream: bus.Events, Cluster: "prod", ID: "prod/s2/ResponseComplete", Data: event("s2", "ResponseComplete", cleanBody)})
}

// TestBatchesAndSingleEventsOnEveryBus: classify reads both formats, finds what each event
// holds, dead-letters the poisoned event of the batch alone (the rest proceed) and acks
// every message, on JetStream and on Kafka.
func TestBatchesAndSingleEventsOnEveryBus(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) bus.Bus
	}{
		{"nats", func(t *testing.T) bus.Bus { return openNATS(t) }},
		{"kafka", openKafka},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.open(t)
			reg := prometheus.NewRegistry()
			svc, err := newService(configWith(func(c *Config) { c.Workers = 1; c.BatchWait = 5 * time.Millisecond }), daemon.Deps{Bus: b, Cluster: "default", Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			runErr := make(chan error, 1)
			go func() { runErr <- svc.Run(ctx) }()
			if err := b.Publish(context.Background(), mixedMessages(t)...); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 30*time.Second, "every event classified", func() bool {
				return testutil.ToFloat64(svc.met.events.WithLabelValues("ok")) >= 5 && testutil.ToFloat64(svc.met.events.WithLabelValues("bad")) >= 1
			})
			ids := map[string]*auditlensv1.Finding{}
			for _, f := range findingsIn(t, collect(t, b, bus.Findings, 1, 300*time.Millisecond)) {
				ids[f.Cluster+"/"+f.AuditId+"/"+f.RuleId] = f
			}
			if len(ids) != 3 || ids["prod/b1/removed-api"] == nil || ids["prod/b2/legacy-sa-token"] == nil || ids["prod/s1/removed-api"] == nil {
				t.Errorf("findings %v, want prod/b1/removed-api, prod/b2/legacy-sa-token, prod/s1/removed-api", keys(ids))
			}
			if f := ids["prod/b1/removed-api"]; f != nil && f.Node != "cp-1" {
				t.Errorf("finding of a batched event has node %q, want the batch's cp-1", f.Node)
			}
			dead := collect(t, b, bus.DeadLetter, 1, 200*time.Millisecond)
			if len(dead) != 1 {
				t.Fatalf("%d dead letters, want the poisoned event alone", len(dead))
			}
			d := dead[0]
			if string(d.Data) != `{"kind":"Pod","poisoned":true}` || !strings.HasSuffix(d.ID, "prod/file/fp/0-300/1") ||
				!strings.Contains(d.Header[bus.HeaderSource], "event 2") || d.Header[bus.HeaderNode] != "cp-1" {
				t.Errorf("dead letter %s from %q: %q", d.ID, d.Header[bus.HeaderSource], d.Data)
			}
			if got := testutil.ToFloat64(svc.met.events.WithLabelValues("ok")); got != 5 {
				t.Errorf("%v events classified, want 5", got)
			}
			cancel()
			if err := <-runErr; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// TestUnreadableBatchIsOneDeadLetter: a batch whose compression is broken cannot be split
// into events; it goes whole to the dead-letter stream, the next message proceeds.
func TestUnreadableBatchIsOneDeadLetter(t *testing.T) {
	b := openNATS(t)
	svc, err := newService(configWith(func(c *Config) { c.Workers = 1; c.BatchWait = 5 * time.Millisecond }), daemon.Deps{Bus: b, Cluster: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(ctx) }()
	broken := bus.Message{Stream: bus.Events, Cluster: "prod", ID: "prod/file/fp/0-9", Data: []byte("not s2"), Header: map[string]string{
		eventbatch.HeaderMessageType: eventbatch.MessageType, eventbatch.HeaderEncoding: eventbatch.CompressionS2, eventbatch.HeaderEvents: "10"}}
	good := bus.Message{Stream: bus.Events, Cluster: "prod", ID: "prod/s1/ResponseComplete", Data: event("s1", "ResponseComplete", removedBody)}
	if err := b.Publish(context.Background(), broken, good); err != nil {
		t.Fatal(err)
	}
	dead := collect(t, b, bus.DeadLetter, 1, 200*time.Millisecond)
	if len(dead) != 1 || string(dead[0].Data) != "not s2" || dead[0].Header[bus.HeaderReasonLabel] != "bad_batch" {
		t.Fatalf("dead letters %d, want the broken batch with reason bad_batch", len(dead))
	}
	if fs := findingsIn(t, collect(t, b, bus.Findings, 1, 100*time.Millisecond)); len(fs) != 1 || fs[0].AuditId != "s1" {
		t.Errorf("findings %v, want s1's", fs)
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// openKafka starts an in-process Kafka cluster (franz-go's kfake speaks the real protocol).
func openKafka(t *testing.T) bus.Bus {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b, err := kafkabus.Open(context.Background(), kafkabus.Config{Brokers: c.ListenAddrs(), CreateTopics: true, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
