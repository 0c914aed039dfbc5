// Package metrics holds the Prometheus metrics ingest exposes, shared by all its inputs.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
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

// Ingest are the counters of both inputs.
type Ingest struct {
	Published *prometheus.CounterVec // input
	Bad       *prometheus.CounterVec // input, reason
	Retries   *prometheus.CounterVec // input
	Requests  *prometheus.CounterVec // code
}

// New registers the metrics on reg (nil: not registered).
func New(reg prometheus.Registerer) *Ingest {
	m := &Ingest{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_events_published_total", Help: "Audit events acknowledged by the bus, per input.",
		}, []string{"input"}),
		Bad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_bad_lines_total", Help: "Lines or webhook items that are not usable audit events, sent to the dead-letter stream, per input and reason.",
		}, []string{"input", "reason"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_publish_retries_total", Help: "Failed publishes of a batch that were retried (file) or answered 503 (webhook).",
		}, []string{"input"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_ingest_webhook_requests_total", Help: "Webhook requests, per HTTP status code.",
		}, []string{"code"}),
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.Bad, m.Retries, m.Requests)
	}
	return m
}
