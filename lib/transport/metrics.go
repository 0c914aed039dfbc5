package transport

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
)

// instrumented counts what passes through a bus.
type instrumented struct {
	bus.Bus
	published, publishErrors, delivered, gaveUp *prometheus.CounterVec
}

// Instrument wraps b so published messages, publish errors and deliveries are counted per
// stream on reg. A nil reg returns b unchanged.
func Instrument(b bus.Bus, reg prometheus.Registerer) bus.Bus {
	if reg == nil {
		return b
	}
	i := &instrumented{
		Bus: b,
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_bus_published_messages_total", Help: "Messages acknowledged by the bus, per stream.",
		}, []string{"stream"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_bus_publish_errors_total", Help: "Publish calls that failed, per stream of their first message.",
		}, []string{"stream"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_bus_delivered_messages_total", Help: "Messages delivered to a consumer, redeliveries included, per stream.",
		}, []string{"stream"}),
		gaveUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_bus_poison_messages_total", Help: "Messages sent to the dead-letter stream after too many deliveries (ConsumerOptions.MaxDeliver), per stream.",
		}, []string{"stream"}),
	}
	reg.MustRegister(i.published, i.publishErrors, i.delivered, i.gaveUp)
	return i
}

func (i *instrumented) Publish(ctx context.Context, msgs ...bus.Message) error {
	if err := i.Bus.Publish(ctx, msgs...); err != nil {
		if len(msgs) > 0 {
			i.publishErrors.WithLabelValues(string(msgs[0].Stream)).Inc()
		}
		return err
	}
	// Count per stream with one counter update each (a publish is usually one stream).
	n, last := 0, bus.Stream("")
	for _, m := range msgs {
		if m.Stream != last && n > 0 {
			i.published.WithLabelValues(string(last)).Add(float64(n))
			n = 0
		}
		last = m.Stream
		n++
	}
	if n > 0 {
		i.published.WithLabelValues(string(last)).Add(float64(n))
	}
	return nil
}

func (i *instrumented) Consumer(s bus.Stream, group string, o bus.ConsumerOptions) (bus.Consumer, error) {
	poison, gaveUp := i.gaveUp.WithLabelValues(string(s)), o.GaveUp
	o.GaveUp = func(d *bus.Delivery) {
		poison.Inc()
		if gaveUp != nil {
			gaveUp(d)
		}
	}
	c, err := i.Bus.Consumer(s, group, o)
	if err != nil {
		return nil, err
	}
	counter := i.delivered.WithLabelValues(string(s))
	return consumerFunc(func(ctx context.Context, h bus.Handler) error {
		return c.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
			counter.Inc()
			h(ctx, d)
		})
	}), nil
}

// Backlog implements bus.BacklogReader when the wrapped bus does.
func (i *instrumented) Backlog(ctx context.Context, s bus.Stream, group string) (int64, error) {
	br, ok := i.Bus.(bus.BacklogReader)
	if !ok {
		return 0, fmt.Errorf("%T cannot report a backlog: %w", i.Bus, errors.ErrUnsupported)
	}
	return br.Backlog(ctx, s, group)
}

type consumerFunc func(ctx context.Context, h bus.Handler) error

func (f consumerFunc) Consume(ctx context.Context, h bus.Handler) error { return f(ctx, h) }
