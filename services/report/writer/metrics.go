package writer

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	written, invalid, deadLettered, writeErrors, unwritten, ackErrors prometheus.Counter
	batches                                                           prometheus.Counter
	batchSize, writeSeconds                                           prometheus.Histogram
	pending                                                           prometheus.Gauge
	// eventMinutes counts the minutes of classify's heartbeats written.
	eventMinutes prometheus.Counter
	// minutesSkipped counts the heartbeat minutes out of range (before 1970, past MaxAhead).
	minutesSkipped prometheus.Counter
	// sightings counts the control-plane sightings of classify's heartbeats written,
	// sightingsSkipped those not usable (no component, not a release, time out of range).
	sightings, sightingsSkipped prometheus.Counter
	// expired counts the findings and migration sightings older than the retention, by kind.
	expired *prometheus.CounterVec
	// heartbeats counts classify's heartbeats written and acknowledged.
	heartbeats prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_written_total",
			Help: "Findings written to ClickHouse (redeliveries included; they count once in queries)."}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_invalid_total",
			Help: "Messages, or findings in a batch message, that were not a usable finding (undecodable, too large, without identity, event time out of range)."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_dead_lettered_total",
			Help: "Invalid messages and findings copied to the dead-letter stream."}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_write_errors_total",
			Help: "Failed ClickHouse writes (each retried until it succeeds)."}),
		unwritten: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_unwritten_at_shutdown_total",
			Help: "Findings left unacknowledged at shutdown because the last write failed; the bus redelivers them."}),
		ackErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_ack_errors_total",
			Help: "Acknowledgements the bus refused after a write (the finding is redelivered and counted once)."}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_batches_total",
			Help: "Batches written to ClickHouse."}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "auditlens_report_batch_findings",
			Help: "Findings per written batch.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "auditlens_report_write_seconds",
			Help: "Duration of successful batch writes.", Buckets: prometheus.DefBuckets}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "auditlens_report_pending_findings",
			Help: "Findings received and not yet written."}),
		eventMinutes: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_event_minutes_written_total",
			Help: "Minutes of classify's heartbeats (a cluster's minute that carried events) written to ClickHouse, repeats included."}),
		minutesSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_event_minutes_skipped_total",
			Help: "Minutes of classify's heartbeats skipped for a time out of range (before 1970, or more than a day past report's clock)."}),
		sightings: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_control_plane_sightings_written_total",
			Help: "Control-plane sightings of classify's heartbeats (a component's release and the newest minute it was seen) written to ClickHouse, repeats included."}),
		sightingsSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_control_plane_sightings_skipped_total",
			Help: "Control-plane sightings of classify's heartbeats skipped: no component, a version that is not a Kubernetes release, or no time from 1970 to a day past report's clock."}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "auditlens_report_expired_on_arrival_total",
			Help: "Findings (kind=finding) and migration sightings (kind=migration_sighting) not written because they arrived older than --retention-days."}, []string{"kind"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_heartbeats_written_total",
			Help: "Heartbeats of classify (event minutes and sightings) written to ClickHouse and acknowledged, redeliveries included."}),
	}
	if reg != nil {
		reg.MustRegister(m.written, m.ackErrors, m.invalid, m.deadLettered, m.writeErrors, m.unwritten, m.batches, m.batchSize, m.writeSeconds, m.pending, m.eventMinutes, m.minutesSkipped, m.sightings, m.sightingsSkipped, m.heartbeats, m.expired)
	}
	return m
}
