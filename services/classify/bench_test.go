package classify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
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
