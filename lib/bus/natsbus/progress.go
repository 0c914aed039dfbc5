package natsbus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A consumer's acknowledgement wait is short (seconds), so that the deliveries a dead
// consumer held are redelivered soon after it died. A live consumer may legitimately hold a
// delivery for much longer (a batch waiting for ClickHouse to come back): holding tells the
// server every AckWait/3 that each such delivery is still in progress, which restarts its
// wait. The server therefore redelivers a message only when its holder has stopped
// (crashed, killed, partitioned away) for a whole AckWait.
type holding struct {
	mu   sync.Mutex
	held map[*acker]struct{}
}

func newHolding() *holding { return &holding{held: make(map[*acker]struct{})} }

// track returns the Acker of m, held until it is settled.
func (h *holding) track(m jetstream.Msg) *acker {
	a := &acker{m: m, h: h}
	h.mu.Lock()
	h.held[a] = struct{}{}
	h.mu.Unlock()
	return a
}

func (h *holding) settle(a *acker) {
	h.mu.Lock()
	delete(h.held, a)
	h.mu.Unlock()
}

// keepAlive signals progress on every held delivery each interval until ctx is done.
func (h *holding) keepAlive(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var batch []*acker
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		batch = batch[:0]
		for a := range h.held {
			batch = append(batch, a)
		}
		h.mu.Unlock()
		for _, a := range batch {
			// Fails only for a message settled meanwhile (nothing to keep) or a lost
			// connection (then the server redelivers after AckWait, as for a dead holder).
			_ = a.m.InProgress()
		}
		clear(batch)
	}
}

// progressInterval is how often held deliveries are kept alive: three times per AckWait, so
// that one late or lost signal does not let a wait expire.
func progressInterval(ackWait time.Duration) time.Duration {
	return max(ackWait/3, 50*time.Millisecond)
}

// acker settles one delivery and stops keeping it alive.
type acker struct {
	m jetstream.Msg
	h *holding
}

func (a *acker) Ack(context.Context) error {
	a.h.settle(a)
	// A plain Ack is fire-and-forget; redelivery after a lost ack is harmless downstream
	// (idempotent writes) and DoubleAck would cost a round trip per message.
	return a.m.Ack()
}

func (a *acker) Nak(delay time.Duration) error {
	a.h.settle(a)
	if delay <= 0 {
		return a.m.Nak()
	}
	return a.m.NakWithDelay(delay)
}

func (a *acker) Term(reason string) error {
	a.h.settle(a)
	return a.m.TermWithReason(reason)
}
