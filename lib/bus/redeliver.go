package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/auditlens/auditlens/lib/reason"
)

// errUndeliverable is the cause of a dead letter given up after too many deliveries.
var errUndeliverable = reason.New("undeliverable", reason.Undeliverable)

// BoundDeliveries wraps h for a consumer of stream s with options o (defaults applied): a
// delivery past o.MaxDeliver is not handed to h but published to the dead-letter stream,
// terminated and reported to o.GaveUp. When the dead letter cannot be published it is asked
// again after a pause (Nak), so nothing is dropped silently. Every bus implementation wraps
// its handler with it.
func BoundDeliveries(p Publisher, s Stream, o ConsumerOptions, h Handler) Handler {
	return func(ctx context.Context, d *Delivery) {
		if d.Delivered <= o.MaxDeliver {
			h(ctx, d)
			return
		}
		id := d.ID
		if id == "" {
			id = d.Position
		}
		cluster := d.Cluster
		if ValidateCluster(cluster) != nil {
			cluster = "unknown"
		}
		cause := fmt.Errorf("%s message not acknowledged after %d deliveries (poison: the consumer failed on it every time): %w", s, d.Delivered-1, errUndeliverable)
		extra := make(map[string]string, len(d.Header)+1)
		for k, v := range d.Header {
			extra[k] = v
		}
		extra[HeaderDelivered] = strconv.Itoa(d.Delivered - 1)
		dl := []Message{NewDeadLetter(cluster, "undeliverable", string(s)+"/"+id, d.Position, cause, d.Data, extra)}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := PublishOrDeadLetter(pctx, p, dl, func(int, error) Message { return dl[0] })
		cancel()
		if err != nil {
			_ = d.Nak(5 * time.Second)
			return
		}
		_ = d.Term(cause.Error())
		if o.GaveUp != nil {
			o.GaveUp(d)
		}
	}
}
