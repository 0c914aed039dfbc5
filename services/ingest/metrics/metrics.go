// Package metrics holds the Prometheus metrics ingest exposes, shared by its file and
// webhook inputs.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Input label values.
const (
	File    = "file"
	Webhook = "webhook"
)

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

// Reason is the bad-line label of err.
func Reason(err error) string {
	switch {
	case errors.Is(err, auditevent.ErrTooLarge), errors.Is(err, tail.ErrLineTooLong):
		return "too_large"
	case errors.Is(err, auditevent.ErrInvalidUTF8):
		return "invalid_utf8"
	case errors.Is(err, auditevent.ErrNotJSON):
		return "not_json"
	case errors.Is(err, auditevent.ErrNotAuditEvent):
		return "not_audit_event"
	case errors.Is(err, tail.ErrIncomplete):
		return "incomplete_line"
	}
	return "other"
}
