package writer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/lib/bus"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/store"
)

// add decodes the findings of d into b and keeps d there to be acknowledged after the write.
// A message that holds no usable finding is dead-lettered and settled here; so is each bad
// finding inside a batch, whose good findings are still written.
func (w *Writer) add(ctx context.Context, d *bus.Delivery, b *batch) {
	if len(d.Data) > w.cfg.MaxFindingBytes {
		w.invalid(ctx, d, fmt.Sprintf("message of %d bytes exceeds %d", len(d.Data), w.cfg.MaxFindingBytes))
		return
	}
	data := d.Data
	if d.Header[auditlensv1.MessageTypeHeader] != auditlensv1.FindingBatchMessageType {
		// One Finding: what classify published before batches, still read during an upgrade.
		if err := b.blk.AppendWire(data, d.Cluster); err != nil {
			w.invalid(ctx, d, findingReason(err))
			return
		}
		w.m.pending.Inc()
		b.ds = append(b.ds, d)
		return
	}
	n, err := b.blk.AppendBatch(data, d.Cluster, func(i int, f []byte, err error) error {
		return w.deadLetterFinding(ctx, d, i, f, findingReason(err))
	})
	switch {
	case errors.Is(err, errDeadLetterFailed):
		// Keep the message on the bus rather than lose the finding that could not be parked.
		_ = d.Nak(w.cfg.RetryMax)
	case err != nil:
		w.invalid(ctx, d, "undecodable finding batch: "+err.Error())
	case n == 0:
		// Every finding in it was dead-lettered.
		if err := d.Ack(ctx); err != nil {
			w.m.ackErrors.Inc()
		}
	default:
		w.m.pending.Add(float64(n))
		b.ds = append(b.ds, d)
	}
}

func findingReason(err error) string {
	if errors.Is(err, store.ErrNoIdentity) {
		return err.Error()
	}
	return "undecodable finding: " + err.Error()
}

// deadLetterMax is the most of an invalid message kept in its dead letter.
const deadLetterMax = 64 << 10

var errDeadLetterFailed = errors.New("dead-letter publish failed")

// invalid counts, logs and dead-letters a message that holds no usable finding, then
// terminates it (or, when the dead letter cannot be published, leaves it for redelivery).
func (w *Writer) invalid(ctx context.Context, d *bus.Delivery, reason string) {
	w.m.invalid.Inc()
	w.log.Warn("skipping invalid finding", "position", d.Position, "reason", reason)
	id := d.ID
	if id == "" {
		id = d.Position
	}
	err := w.deadLetter(ctx, d.Cluster, "report:"+id, "report:"+d.Position, d.Data, reason)
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		w.log.Warn("dead letter refused for its size; dropping the message", "position", d.Position)
	case err != nil:
		// Keep it on the bus rather than lose it.
		w.log.Warn("dead-letter publish failed; redelivering the message later", "position", d.Position, "err", err)
		_ = d.Nak(w.cfg.RetryMax)
		return
	}
	_ = d.Term(reason)
}

// deadLetterFinding counts, logs and dead-letters finding i of the batch in d.
func (w *Writer) deadLetterFinding(ctx context.Context, d *bus.Delivery, i int, f []byte, reason string) error {
	w.m.invalid.Inc()
	pos := d.Position + "#" + strconv.Itoa(i)
	w.log.Warn("skipping invalid finding", "position", pos, "reason", reason)
	id := d.ID
	if id == "" {
		id = d.Position
	}
	err := w.deadLetter(ctx, d.Cluster, "report:"+id+"#"+strconv.Itoa(i), "report:"+pos, f, reason)
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		w.log.Warn("dead letter refused for its size; dropping the finding", "position", pos)
	case err != nil:
		w.log.Warn("dead-letter publish failed; redelivering the message later", "position", pos, "err", err)
		return fmt.Errorf("%w: %w", errDeadLetterFailed, err)
	}
	return nil
}

// deadLetter publishes data (its first deadLetterMax bytes) to the dead-letter stream and
// counts it.
func (w *Writer) deadLetter(ctx context.Context, cluster, id, source string, data []byte, reason string) error {
	if bus.ValidateCluster(cluster) != nil {
		cluster = "unknown"
	}
	if len(data) > deadLetterMax {
		reason += fmt.Sprintf("; first %d of %d bytes kept", deadLetterMax, len(data))
		data = data[:deadLetterMax]
	}
	msg := bus.Message{Stream: bus.DeadLetter, Cluster: cluster, ID: id, Data: data,
		Header: map[string]string{bus.HeaderSource: source, bus.HeaderReason: reason}}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.bus.Publish(pctx, msg); err != nil {
		return err
	}
	w.m.deadLettered.Inc()
	return nil
}
