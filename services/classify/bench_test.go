package classify

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/classify/dedup"
)

// BenchmarkSettle measures the service's hot path without a bus: one batch of 256 events (a
// quarter calling a removed API, one undecodable) decoded, classified, packed into
// FindingBatch messages and a dead letter, handed to a bus that keeps nothing, and acked.
func BenchmarkSettle(b *testing.B) {
	cfg := DefaultConfig()
	svc, err := newService(cfg, daemon.Deps{Bus: discardBus{}, Cluster: "default"})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]*bus.Delivery, cfg.BatchSize)
	size := 0
	for i := range batch {
		id := fmt.Sprintf("e%03d", i)
		data := event(id, "ResponseComplete", cleanBody)
		switch {
		case i == 7:
			data = []byte(`{"kind":"Pod"}`)
		case i%4 == 0:
			data = event(id, "ResponseComplete", removedBody)
		}
		d := &bus.Delivery{Acker: noAcker{}, Delivered: 1}
		d.Stream, d.Cluster, d.ID, d.Data, d.Position = bus.Events, "prod", id+"/ResponseComplete", data, "AUDIT_EVENTS:"+id
		batch[i] = d
		size += len(data)
	}
	w := &work{dec: auditevent.NewDecoder(cfg.MaxEventSize)}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		svc.seen = dedup.New(cfg.DedupWindow) // every round finds what the last one did
		svc.settle(w, batch)
	}
}

// BenchmarkSettleRealBatches measures the consumer's path of the end-to-end benchmark
// (services/auditlens/e2e BenchmarkPipelineThroughput) without a bus: the genuine events of
// examples/audit.log, each copy with new audit ids, in EventBatch messages as ingest packs
// them (S2, default bounds), settled BatchSize events at a time as a worker does:
// decompressed, decoded, classified, findings packed and handed to a bus that keeps nothing,
// acked. Reported per event.
func BenchmarkSettleRealBatches(b *testing.B) {
	src, err := os.ReadFile("../../examples/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(src), []byte("\n"))
	cfg := DefaultConfig()
	svc, err := newService(cfg, daemon.Deps{Bus: discardBus{}, Cluster: "default"})
	if err != nil {
		b.Fatal(err)
	}
	p := eventbatch.NewPacker(eventbatch.DefaultConfig(), "prod", "prod/file/fp", eventbatch.ByRange, nil)
	var msgs []bus.Message
	events := 0
	for i := range 24 { // ~4000 events
		for j, line := range lines {
			ev := bytes.Replace(line, []byte(`"auditID":"`), []byte(fmt.Sprintf(`"auditID":"%d-`, i)), 1)
			msgs = p.Add(msgs, ev, fmt.Sprint(i*len(lines)+j))
			events++
		}
	}
	msgs = p.Flush(msgs)
	// The settles of a worker: deliveries until BatchSize events.
	var settles [][]*bus.Delivery
	n := cfg.BatchSize
	for _, m := range msgs {
		if n >= cfg.BatchSize {
			settles, n = append(settles, nil), 0
		}
		d := &bus.Delivery{Acker: noAcker{}, Delivered: 1}
		d.Stream, d.Cluster, d.ID, d.Data, d.Header, d.Position = bus.Events, m.Cluster, m.ID, m.Data, m.Header, "AUDIT_EVENTS:"+m.ID
		settles[len(settles)-1] = append(settles[len(settles)-1], d)
		n += eventbatch.Count(m.Header)
	}
	w := &work{dec: auditevent.NewDecoder(cfg.MaxEventSize)}
	b.ReportAllocs()
	for b.Loop() {
		svc.seen = dedup.New(cfg.DedupWindow) // every round finds what the last one did
		for _, batch := range settles {
			svc.settle(w, batch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1000/float64(b.N*events), "us/event")
}

// discardBus accepts every publish and keeps nothing.
type discardBus struct{}

func (discardBus) Ready() error                                  { return nil }
func (discardBus) Close() error                                  { return nil }
func (discardBus) Publish(context.Context, ...bus.Message) error { return nil }
func (discardBus) Consumer(bus.Stream, string, bus.ConsumerOptions) (bus.Consumer, error) {
	return nil, fmt.Errorf("discardBus has no consumer")
}

type noAcker struct{}

func (noAcker) Ack(context.Context) error { return nil }
func (noAcker) Nak(time.Duration) error   { return nil }
func (noAcker) Term(string) error         { return nil }
