package classify

import "github.com/prometheus/client_golang/prometheus"

// metrics of the service.
type metrics struct {
	events      *prometheus.CounterVec
	findings    *prometheus.CounterVec
	parseErrors *prometheus.CounterVec
	duplicates  prometheus.Counter
	lag         prometheus.Histogram
	lagLast     prometheus.Gauge
	redelivered prometheus.Counter
	panics      prometheus.Counter
	// heartbeats counts Heartbeat messages published, heartbeatErrors failed publishes.
	heartbeats      prometheus.Counter
	heartbeatErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_classify_events_total", Help: "Audit events classified, by result (ok, bad).",
		}, []string{"result"}),
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_classify_findings_total", Help: "Findings published, by rule.",
		}, []string{"rule"}),
		parseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auditlens_classify_parse_errors_total", Help: "Events that could not be decoded (sent to the dead-letter stream), by reason.",
		}, []string{"reason"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_classify_duplicate_findings_total", Help: "Findings not published again because another stage of the same request already produced them.",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "auditlens_classify_event_lag_seconds", Help: "Time from the event's stageTimestamp to its classification (consumer lag).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600},
		}),
		lagLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "auditlens_classify_lag_seconds", Help: "Lag of the last classified event: now minus its stageTimestamp.",
		}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_classify_redeliveries_total", Help: "Events received more than once (unsettled or failed before).",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_classify_panics_total", Help: "Events whose classification panicked (sent to the dead-letter stream).",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_classify_heartbeats_total", Help: "Heartbeat messages published (which minutes of each cluster's stream carried events).",
		}),
		heartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "auditlens_classify_heartbeat_errors_total", Help: "Failed publishes of heartbeats (best effort: the next one re-affirms their minutes).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.findings, m.parseErrors, m.duplicates, m.lag, m.lagLast, m.redelivered, m.panics, m.heartbeats, m.heartbeatErrors)
	}
	return m
}
