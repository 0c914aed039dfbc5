// Package pipeline is the classify service: it consumes audit events from the bus, matches
// them against the rule catalogue and publishes the findings of each batch of events in
// protobuf FindingBatch messages, acknowledging each event only once its findings are stored.
package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/reason"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/dedup"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Config configures the classify service.
type Config struct {
	// Group is the consumer group shared by replicas (default "classify").
	Group string
	// RulesFiles add to or override the embedded catalogue.
	RulesFiles flagenv.StringList
	// Workers decode and classify in parallel (default 2).
	Workers int
	// BatchSize bounds the events one worker settles together (default 256).
	BatchSize int
	// BatchWait bounds how long a worker waits to fill a batch (default 20ms).
	BatchWait time.Duration
	// MaxEventSize rejects larger events to the dead-letter stream (default 4 MiB).
	MaxEventSize int
	// DedupWindow is the number of finding keys remembered (default dedup.DefaultSize).
	DedupWindow int
	// MaxUnacked bounds deliveries in flight (default 4096).
	MaxUnacked int
	// AckWait is how long the bus waits for a settle before redelivering (default 30s).
	AckWait time.Duration
	// FindingsMessageBytes bounds one FindingBatch message (default 32 KiB).
	FindingsMessageBytes int
}

// DefaultFindingsMessageBytes is the default of --classify-findings-message-bytes: about 45
// findings of 700 bytes per message. It stays far below the bus limits (NATS max_payload
// and Kafka message.max.bytes, 1 MiB by default) and keeps what report pulls at once small:
// it pulls up to 1000 messages, and with 64 KiB messages the embedded NATS server closed the
// connection (1000 x 64 KiB is the 64 MiB a client may have pending) and the pulled messages
// came back only after the ack wait.
const DefaultFindingsMessageBytes = 32 << 10

// RegisterFlags adds the service's flags to fs (names prefixed so they can share a flag set
// with the other services in an all-in-one binary).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Group, "classify-group", "classify", "consumer `group` shared by classify replicas")
	fs.Var(&c.RulesFiles, "rules-file", "extra catalogue `files`, comma-separated or repeated, that add or override rules")
	fs.IntVar(&c.Workers, "classify-workers", 2, "goroutines decoding and classifying events")
	fs.IntVar(&c.BatchSize, "classify-batch-size", 256, "events settled together per worker")
	fs.DurationVar(&c.BatchWait, "classify-batch-wait", 20*time.Millisecond, "longest wait to fill a batch")
	fs.IntVar(&c.MaxEventSize, "classify-max-event-size", 4<<20, "largest event accepted, in bytes; larger ones go to the dead-letter stream")
	fs.IntVar(&c.DedupWindow, "classify-dedup-window", dedup.DefaultSize, "finding keys remembered to merge the stages of one request")
	fs.IntVar(&c.MaxUnacked, "classify-max-unacked", 4096, "events delivered but not yet settled")
	fs.DurationVar(&c.AckWait, "classify-ack-wait", 30*time.Second, "redelivery delay of an unsettled event")
	fs.IntVar(&c.FindingsMessageBytes, "classify-findings-message-bytes", DefaultFindingsMessageBytes,
		"largest message of findings (a FindingBatch) published, in bytes; a larger finding goes alone. Keep it below the bus limit and report's --max-finding-bytes")
}

func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = "classify"
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 256
	}
	if c.BatchWait <= 0 {
		c.BatchWait = 20 * time.Millisecond
	}
	if c.MaxEventSize <= 0 {
		c.MaxEventSize = 4 << 20
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = dedup.DefaultSize
	}
	if c.MaxUnacked <= 0 {
		c.MaxUnacked = 4096
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.FindingsMessageBytes <= 0 {
		c.FindingsMessageBytes = DefaultFindingsMessageBytes
	}
	return c
}

// Validate checks the values and that the rule catalogue (with --rules-file) loads.
func (c *Config) Validate() error {
	for _, f := range []struct {
		name  string
		value int
	}{
		{"classify-workers", c.Workers}, {"classify-batch-size", c.BatchSize}, {"classify-max-event-size", c.MaxEventSize},
		{"classify-dedup-window", c.DedupWindow}, {"classify-max-unacked", c.MaxUnacked}, {"classify-findings-message-bytes", c.FindingsMessageBytes},
	} {
		if f.value < 0 {
			return fmt.Errorf("--%s %d: want 0 (the default) or more", f.name, f.value)
		}
	}
	if c.FindingsMessageBytes > 1<<20 {
		return fmt.Errorf("--classify-findings-message-bytes %d: want at most 1048576 (the bus and report's --max-finding-bytes default)", c.FindingsMessageBytes)
	}
	if c.MaxUnacked > 0 && c.BatchSize > c.MaxUnacked {
		return fmt.Errorf("--classify-batch-size %d is larger than --classify-max-unacked %d", c.BatchSize, c.MaxUnacked)
	}
	if _, err := rules.Load(c.RulesFiles...); err != nil {
		return err
	}
	return nil
}

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
	}
	if reg != nil {
		reg.MustRegister(m.events, m.findings, m.parseErrors, m.duplicates, m.lag, m.lagLast, m.redelivered, m.panics)
	}
	return m
}

// Service is the running classify stage.
type Service struct {
	cfg     Config
	bus     bus.Bus
	cluster string
	log     *slog.Logger
	engine  classifier
	seen    *dedup.Window
	met     *metrics
	running atomic.Bool
}

var _ daemon.Component = (*Service)(nil)

// classifier is what the service needs of the rule engine (*rules.Engine); tests put a
// faulty one in its place.
type classifier interface {
	Classify(ev *auditevent.Event, dst []rules.Match) []rules.Match
	Finding(ev *auditevent.Event, m *rules.Match, cluster, node string) *auditlensv1.Finding
}

// New builds the service from cfg; d.Bus is required.
func New(cfg Config, d daemon.Deps) (daemon.Component, error) {
	return NewService(cfg, d)
}

// NewService is New returning the concrete type.
func NewService(cfg Config, d daemon.Deps) (*Service, error) {
	cfg = cfg.withDefaults()
	if d.Bus == nil {
		return nil, errors.New("no bus")
	}
	cat, err := rules.Load(cfg.RulesFiles...)
	if err != nil {
		return nil, err
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var reg prometheus.Registerer = d.Registry
	if d.Registry == nil {
		reg = nil
	}
	return &Service{
		cfg: cfg, bus: d.Bus, cluster: d.Cluster, log: log.With("stage", "classify"),
		engine: rules.NewEngine(cat), seen: dedup.New(cfg.DedupWindow), met: newMetrics(reg),
	}, nil
}

// Ready implements daemon.Component.
func (s *Service) Ready() error {
	if !s.running.Load() {
		return errors.New("classify: not consuming")
	}
	return s.bus.Ready()
}

// Run consumes events until ctx is done, then finishes the batches in hand and returns.
func (s *Service) Run(ctx context.Context) error {
	// Panics and events too large for the bus are dead-lettered by this service itself, so
	// what is redelivered is almost always an event whose findings could not be published
	// (findings stream unavailable): the bound covers about a day of that, with retryDelay's
	// backoff, instead of the bus's default 50 deliveries.
	cons, err := s.bus.Consumer(bus.Events, s.cfg.Group, bus.ConsumerOptions{MaxUnacked: s.cfg.MaxUnacked, AckWait: s.cfg.AckWait, MaxDeliver: classifyMaxDeliver})
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	in := make(chan *bus.Delivery, s.cfg.BatchSize*s.cfg.Workers)
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.worker(in)
		}()
	}
	s.running.Store(true)
	s.log.Info("consuming", "stream", bus.Events, "group", s.cfg.Group, "workers", s.cfg.Workers)
	err = cons.Consume(ctx, func(ctx context.Context, d *bus.Delivery) {
		select {
		case in <- d:
		case <-ctx.Done():
			_ = d.Nak(0) // not taken: let another replica (or the next start) have it
		}
	})
	s.running.Store(false)
	close(in)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	return nil
}

// worker settles deliveries in batches: decode, classify, publish findings and dead letters
// in one call, then ack (or nak all on a failed publish, so nothing is lost).
func (s *Service) worker(in <-chan *bus.Delivery) {
	dec := auditevent.NewDecoder(s.cfg.MaxEventSize)
	var matches []rules.Match
	batch := make([]*bus.Delivery, 0, s.cfg.BatchSize)
	for {
		d, ok := <-in
		if !ok {
			return
		}
		batch = append(batch[:0], d)
		timer := time.NewTimer(s.cfg.BatchWait)
	fill:
		for len(batch) < s.cfg.BatchSize {
			select {
			case d, ok := <-in:
				if !ok {
					break fill
				}
				batch = append(batch, d)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		matches = s.settle(dec, batch, matches)
	}
}

func (s *Service) settle(dec *auditevent.Decoder, batch []*bus.Delivery, matches []rules.Match) []rules.Match {
	var out []bus.Message
	var keys []string
	// The findings, per cluster in order of appearance, packed into FindingBatch messages.
	var clusters []*findingBatch
	findingsOf := func(cluster string) *findingBatch {
		for _, fb := range clusters {
			if fb.cluster == cluster {
				return fb
			}
		}
		fb := newFindingBatch(cluster, s.cfg.FindingsMessageBytes)
		clusters = append(clusters, fb)
		return fb
	}
	inBatch := map[string]bool{}
	now := time.Now()
	perRule := map[string]int{}
	bad := 0
	for _, d := range batch {
		if d.Delivered > 1 {
			s.met.redelivered.Inc()
		}
		cluster := d.Cluster
		if cluster == "" {
			cluster = s.cluster
		}
		var found []found
		var err error
		found, matches, err = s.classify(dec, d, cluster, now, matches[:0])
		if err != nil {
			bad++
			out = append(out, s.deadLetter(d, cluster, err))
			continue
		}
		for _, f := range found {
			if inBatch[f.key] || s.seen.Seen(f.key) {
				s.met.duplicates.Inc()
				continue
			}
			inBatch[f.key] = true
			if err := findingsOf(cluster).add(f.key, f.finding); err != nil {
				s.log.Error("marshal finding", "err", err)
				continue
			}
			keys = append(keys, f.key)
			perRule[f.finding.RuleId]++
		}
	}
	for _, fb := range clusters {
		out = append(out, fb.messages()...)
	}
	if len(out) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckWait)
		err := s.bus.Publish(ctx, out...)
		cancel()
		if err != nil {
			s.log.Warn("publish findings failed; events will be redelivered", "events", len(batch), "err", err)
			for _, d := range batch {
				_ = d.Nak(retryDelay(d.Delivered))
			}
			return matches
		}
	}
	s.seen.Add(keys...)
	for id, n := range perRule {
		s.met.findings.WithLabelValues(id).Add(float64(n))
	}
	s.met.events.WithLabelValues("ok").Add(float64(len(batch) - bad))
	if bad > 0 {
		s.met.events.WithLabelValues("bad").Add(float64(bad))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range batch {
		if err := d.Ack(ctx); err != nil {
			s.log.Warn("ack", "position", d.Position, "err", err)
		}
	}
	return matches
}

// found is one finding of an event with its de-duplication key.
type found struct {
	key     string
	finding *auditlensv1.Finding
}

// errPanic marks an event whose classification panicked.
var errPanic = reason.New("panic while classifying", reason.Panic)

// classify decodes and classifies one delivery. An event that cannot be decoded, or whose
// classification panics (a bug, or a rule meeting input it was not written for), is an error
// for the dead-letter stream: one event never stops the others nor, redelivered for ever,
// restarts the service.
// It returns matches (its scratch space) for the next call.
func (s *Service) classify(dec *auditevent.Decoder, d *bus.Delivery, cluster string, now time.Time, matches []rules.Match) (out []found, _ []rules.Match, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("%w: %v", errPanic, p)
			s.met.panics.Inc()
			s.log.Error("classifying an event panicked; sent to the dead-letter stream", "id", d.ID, "position", d.Position,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	ev, err := dec.DecodeEvent(d.Data)
	if err != nil {
		reason := reasonOf(err)
		s.met.parseErrors.WithLabelValues(reason).Inc()
		s.log.Warn("undecodable event sent to the dead-letter stream", "position", d.Position, "source", d.Header[bus.HeaderSource], "err", err)
		return nil, matches, err
	}
	if !ev.StageTimestamp.IsZero() {
		lag := now.Sub(ev.StageTimestamp).Seconds()
		s.met.lag.Observe(max(lag, 0))
		s.met.lagLast.Set(lag)
	}
	matches = s.engine.Classify(ev, matches)
	for i := range matches {
		m := &matches[i]
		out = append(out, found{dedup.Key(cluster, ev.AuditID, m.Rule.ID), s.engine.Finding(ev, m, cluster, d.Header[bus.HeaderNode])})
	}
	return out, matches, nil
}

// deadLetter wraps an undecodable event for the dead-letter stream.
func (s *Service) deadLetter(d *bus.Delivery, cluster string, err error) bus.Message {
	id := d.ID
	if id == "" {
		sum := sha256.Sum256(d.Data)
		id = hex.EncodeToString(sum[:16])
	}
	source := d.Position
	if src := d.Header[bus.HeaderSource]; src != "" {
		source = src + " (" + d.Position + ")"
	}
	var extra map[string]string
	if n := d.Header[bus.HeaderNode]; n != "" {
		extra = map[string]string{bus.HeaderNode: n}
	}
	return bus.NewDeadLetter(cluster, "classify", id, source, fmt.Errorf("classify: %w", err), d.Data, extra)
}

func reasonOf(err error) string {
	for _, e := range []error{auditevent.ErrNotJSON, auditevent.ErrInvalidUTF8, auditevent.ErrTooLarge, auditevent.ErrNotAuditEvent} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// classifyMaxDeliver bounds how often one event is handed to classify before it is given up
// to the dead-letter stream.
const classifyMaxDeliver = 1000

// retryDelay is how long an event whose findings could not be published waits before it is
// delivered again: one second, doubling with each delivery up to a minute.
func retryDelay(delivered int) time.Duration {
	if delivered < 1 {
		delivered = 1
	}
	return min(time.Second<<min(delivered-1, 6), time.Minute)
}
