package metrics

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/eventbatch"
	"github.com/auditlens/auditlens/lib/envelope"
)

// Batch is what a pulling source (Kafka, CloudWatch) publishes at once: msgs, of which events
// are audit events and the rest dead letters, counted per reason in bad.
type Batch struct {
	Msgs   []bus.Message
	Events int
	Bad    map[string]int
}

// PublishUntilStored publishes b for input until the bus stored all of it (retrying with
// back-off while it fails, counting each retry, the input stuck meanwhile: see Stuck) or ctx
// ends; a message the bus refuses for good (its size, a cluster name it cannot carry) becomes
// a dead letter named by stage, source and node, and the others are stored. Then it counts
// what was published and what was bad. The caller acknowledges its own source only when it
// returns nil. what names the source's position in the retry log ("the Kafka offsets").
func (m *Ingest) PublishUntilStored(ctx context.Context, p bus.Publisher, log *slog.Logger, input, source, node, what string, b Batch) error {
	if b.Bad == nil {
		b.Bad = map[string]int{}
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		err := bus.PublishOrDeadLetter(ctx, p, b.Msgs, bus.RefusedDeadLetter(b.Msgs, input, source, node, func(msg *bus.Message, err error) {
			log.Warn("event the bus refuses sent to the dead-letter stream", "input", input, "bytes", len(msg.Data), "id", bus.Short(msg.ID, 100), "err", bus.Short(err.Error(), 300))
			n := eventbatch.Count(msg.Header) // a batch refused is all its events
			if msg.Stream == bus.Events {
				b.Events -= n
			}
			b.Bad[Refused(err)] += n
		}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		m.Retries.WithLabelValues(input).Inc()
		m.SetStuck(input, err)
		log.Warn("publish failed; holding "+what+" and retrying", "err", err)
		if err := retry.Wait(ctx, attempt); err != nil {
			return err
		}
	}
	m.SetStuck(input, nil)
	m.Published.WithLabelValues(input).Add(float64(b.Events))
	for label, n := range b.Bad {
		m.Bad.WithLabelValues(input, label).Add(float64(n))
	}
	return nil
}

// Converted is what a pulling source made of one record: event messages and dead letters,
// how many of them are events, and the reason label of a bad one ("" when none). Err wrapping
// envelope.ErrBusy means the record could not be decoded now: the decoded bytes in flight are
// at their limit.
type Converted struct {
	Msgs   []bus.Message
	Events int
	Bad    string
	Err    error
}

// PublishRecords publishes what convert makes of records 0..n-1 (with PublishUntilStored), in
// runs whose decoded bytes lim bounds: each record decodes within lim.Max (lim is Reset before
// each), and when the budget of lim is spent the run so far is published and its bytes given
// back before the next record is decoded (or, when other sources hold the budget, after a
// wait). With perRecord each record's messages are packed on their own (batch): a Kafka
// record is the same after a restart, a run is not; else a run is packed as one (a CloudWatch
// page, read again the same after a restart).
func (m *Ingest) PublishRecords(ctx context.Context, p bus.Publisher, log *slog.Logger, input, source, node, what string, batch eventbatch.Config, perRecord bool, lim *envelope.Limit, n int, convert func(i int) Converted) error {
	defer lim.Release()
	var run Batch
	flush := func() error {
		if len(run.Msgs) == 0 && len(run.Bad) == 0 {
			return nil
		}
		if !perRecord {
			run.Msgs = eventbatch.Pack(batch, run.Msgs)
		}
		err := m.PublishUntilStored(ctx, p, log, input, source, node, what, run)
		run = Batch{}
		lim.Release()
		return err
	}
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	waits := 0
	for i := 0; i < n; {
		lim.Reset()
		c := convert(i)
		if errors.Is(c.Err, envelope.ErrBusy) {
			if len(run.Msgs) > 0 {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			waits++
			if err := retry.Wait(ctx, waits); err != nil {
				return err
			}
			continue
		}
		waits = 0
		if perRecord {
			c.Msgs = eventbatch.Pack(batch, c.Msgs)
		}
		run.Msgs = append(run.Msgs, c.Msgs...)
		run.Events += c.Events
		if c.Bad != "" {
			if run.Bad == nil {
				run.Bad = map[string]int{}
			}
			run.Bad[c.Bad]++
		}
		i++
	}
	return flush()
}
