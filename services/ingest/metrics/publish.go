package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
)

// Batch is what a pulling source (Kafka, CloudWatch) publishes at once: msgs, of which events
// are audit events and the rest dead letters, counted per reason in bad.
type Batch struct {
	Msgs   []bus.Message
	Events int
	Bad    map[string]int
}

// PublishUntilStored publishes b for input until the bus stored all of it (retrying with
// back-off while it fails, counting each retry) or ctx ends; an event larger than the bus
// accepts becomes a dead letter named by stage, source and node. Then it counts what was
// published and what was bad. The caller acknowledges its own source only when it returns nil.
// what names the source's position in the retry log ("the Kafka offsets").
func (m *Ingest) PublishUntilStored(ctx context.Context, p bus.Publisher, log *slog.Logger, input, source, node, what string, b Batch) error {
	if b.Bad == nil {
		b.Bad = map[string]int{}
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		err := bus.PublishOrDeadLetter(ctx, p, b.Msgs, bus.TooLargeDeadLetter(b.Msgs, input, source, node, func(msg *bus.Message) {
			log.Warn("event larger than the bus accepts; sent to the dead-letter stream", "input", input, "bytes", len(msg.Data), "id", bus.Short(msg.ID, 100))
			n := eventbatch.Count(msg.Header) // a batch refused is all its events
			if msg.Stream == bus.Events {
				b.Events -= n
			}
			b.Bad[TooLargeForBus] += n
		}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		m.Retries.WithLabelValues(input).Inc()
		log.Warn("publish failed; holding "+what+" and retrying", "err", err)
		if err := retry.Wait(ctx, attempt); err != nil {
			return err
		}
	}
	m.Published.WithLabelValues(input).Add(float64(b.Events))
	for label, n := range b.Bad {
		m.Bad.WithLabelValues(input, label).Add(float64(n))
	}
	return nil
}
