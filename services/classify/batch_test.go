package classify

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

func testFinding(i int, extra string) *auditlensv1.Finding {
	return &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: fmt.Sprintf("a%03d", i),
		Message: "migrate" + extra, Evidence: []*auditlensv1.Evidence{{Path: "objectRef.apiVersion", Value: "v1beta1"}}}
}

func TestFindingBatchBoundsMessages(t *testing.T) {
	for _, c := range []string{eventbatch.CompressionNone, eventbatch.CompressionS2, eventbatch.CompressionZstd} {
		t.Run(c, func(t *testing.T) { testFindingBatchBoundsMessages(t, c) })
	}
}

func testFindingBatchBoundsMessages(t *testing.T, compression string) {
	const maxBytes = 1024
	fb := newFindingBatch("prod", maxBytes, compression)
	var want []string
	for i := range 40 {
		extra := ""
		if i == 17 {
			extra = string(make([]byte, 3000)) // larger than a message: goes alone
		}
		if err := fb.add(fmt.Sprintf("prod/a%03d/removed-api", i), testFinding(i, extra)); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("a%03d", i))
	}
	bad := testFinding(99, "\xff not UTF-8")
	if err := fb.add("prod/a099/removed-api", bad); err == nil {
		t.Fatal("a finding proto.Marshal refuses was added")
	}
	msgs := fb.messages()
	if len(msgs) < 4 {
		t.Fatalf("%d messages for ~4 KiB of findings in messages of 1 KiB", len(msgs))
	}
	var got []string
	ids := map[string]bool{}
	for _, m := range msgs {
		if m.Stream != bus.Findings || m.Cluster != "prod" || m.Header[auditlensv1.MessageTypeHeader] != auditlensv1.FindingBatchMessageType {
			t.Errorf("message %+v", m)
		}
		if ids[m.ID] {
			t.Errorf("message id %s twice", m.ID)
		}
		ids[m.ID] = true
		if got := m.Header[eventbatch.HeaderEncoding]; got != compression && (got != "" || compression != eventbatch.CompressionNone) {
			t.Errorf("message %s: encoding %q, want %q", m.ID, got, compression)
		}
		raw, _, err := eventbatch.Decompress(m.Header, m.Data, nil)
		if err != nil {
			t.Fatalf("message %s: %v", m.ID, err)
		}
		if compression != eventbatch.CompressionNone && len(m.Data) >= len(raw) {
			t.Errorf("message %s: %d bytes compressed with %s from %d", m.ID, len(m.Data), compression, len(raw))
		}
		var batch auditlensv1.FindingBatch
		if err := proto.Unmarshal(raw, &batch); err != nil {
			t.Fatalf("message %s: %v", m.ID, err)
		}
		if len(raw) > maxBytes && len(batch.Findings) != 1 {
			t.Errorf("message %s of %d bytes holds %d findings", m.ID, len(raw), len(batch.Findings))
		}
		for _, f := range batch.Findings {
			got = append(got, f.AuditId)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("findings in order %v, want %v", got, want)
	}

	// The id depends on the findings a message holds: the same ones again (a retried
	// publish) get the same id, another composition (after a restart) another id.
	again := newFindingBatch("prod", maxBytes, compression)
	other := newFindingBatch("prod", 1<<20, compression)
	for i := range 40 {
		extra := ""
		if i == 17 {
			extra = string(make([]byte, 3000))
		}
		for _, b := range []*findingBatch{again, other} {
			if err := b.add(fmt.Sprintf("prod/a%03d/removed-api", i), testFinding(i, extra)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, m := range again.messages() {
		if m.ID != msgs[i].ID {
			t.Errorf("message %d: id %s, then %s", i, msgs[i].ID, m.ID)
		}
	}
	if m := other.messages(); len(m) != 1 || ids[m[0].ID] {
		t.Errorf("one message of another composition: %d messages, id %s", len(m), m[0].ID)
	}
}

// TestSettlePublishesOneBatchPerCluster: events of two clusters in one batch give a
// FindingBatch message per cluster, published before the events are acked.
func TestSettlePublishesOneBatchPerCluster(t *testing.T) {
	var mu sync.Mutex
	fb := &fakeBus{}
	states := make([]string, 30)
	for i := range 30 {
		cluster := "prod"
		if i%3 == 0 {
			cluster = "staging"
		}
		id := fmt.Sprintf("e%02d", i)
		d := &bus.Delivery{Acker: fakeAcker{&mu, &states[i]}, Delivered: 1}
		d.Stream, d.Cluster, d.ID, d.Data = bus.Events, cluster, id, event(id, "ResponseComplete", removedBody)
		fb.events = append(fb.events, d)
	}
	svc, err := newService(configWith(func(c *Config) { c.Workers = 1; c.BatchWait = 50 * time.Millisecond; c.FindingsMessageBytes = 2048 }), daemon.Deps{Bus: fb, Cluster: "default"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	testkit.Eventually(t, 20*time.Second, "every event acked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range states {
			if s != "ack" {
				return false
			}
		}
		return true
	})
	cancel()
	<-done
	var ds []*bus.Delivery
	perCluster := map[string]int{}
	for _, m := range fb.published {
		ds = append(ds, &bus.Delivery{Message: m})
		perCluster[m.Cluster]++
	}
	got := map[string]int{}
	for _, f := range findingsIn(t, ds) {
		got[f.Cluster]++
	}
	if got["prod"] != 20 || got["staging"] != 10 || perCluster["prod"] < 2 || perCluster["staging"] < 1 {
		t.Errorf("findings per cluster %v in messages per cluster %v", got, perCluster)
	}
}
