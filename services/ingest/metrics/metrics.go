// Package metrics holds the Prometheus metrics ingest exposes, shared by all its inputs, and
// the publishing loop and stuck-input state the pulling sources share.
package metrics

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/reason"
)

// Input label values.
const (
	File    = "file"
	Webhook = "webhook"
)

// TooLargeForBus is the reason label of an event the bus refused for its size (NATS's
// max_payload, Kafka's message.max.bytes), beside the labels of lib/reason (reason.Of) that
// say why input was unusable.
const TooLargeForBus = "too_large_for_bus"

// Refused is the reason label of a message the bus refused for good with err: TooLargeForBus
// for its size, else the label err carries (reason.Unpublishable for a cluster name the bus
// cannot carry).
func Refused(err error) string {
	if errors.Is(err, bus.ErrTooLarge) {
		return TooLargeForBus
	}
	return reason.Of(err)
}

// Ingest are the counters of all inputs, and which of them are stuck.
type Ingest struct {
	Published *prometheus.CounterVec // input
	Bad       *prometheus.CounterVec // input, reason
	Retries   *prometheus.CounterVec // input
	Requests  *prometheus.CounterVec // input, code: the HTTP inputs' answers

	mu    sync.Mutex
	stuck map[string]error // input -> why its publishing is failing
}

// New registers the metrics on reg (nil: not registered).
func New(reg prometheus.Registerer) *Ingest {
	m := &Ingest{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_events_published_total", Help: "Audit events acknowledged by the bus, per input (an event delivered again under a request already counted is not counted again).",
		}, []string{"input"}),
		Bad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_bad_lines_total", Help: "Lines or webhook items that are not usable audit events, sent to the dead-letter stream, per input and reason.",
		}, []string{"input", "reason"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_publish_retries_total", Help: "Failed publishes of a batch that were retried (file, kafka, cloudwatch), answered 503 (webhook, firehose) or nacked (pubsub).",
		}, []string{"input"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_requests_total", Help: "HTTP requests answered by the webhook and the Firehose endpoint, per input and status code.",
		}, []string{"input", "code"}),
		stuck: map[string]error{},
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.Bad, m.Retries, m.Requests)
	}
	return m
}

// SetStuck records that input's publishing fails with err (nil: it works again).
func (m *Ingest) SetStuck(input string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.stuck, input)
		return
	}
	m.stuck[input] = err
}

// Stuck is why input's publishing is failing now, nil when it is not: a readiness check.
func (m *Ingest) Stuck(input string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.stuck[input]; err != nil {
		return fmt.Errorf("publishing %s events is failing: %w", input, err)
	}
	return nil
}
