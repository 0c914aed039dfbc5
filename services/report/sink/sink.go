// Package sink is the report service: it consumes findings from the bus, writes them to
// ClickHouse in batches and acknowledges each message only after its batch is committed;
// with a weekly schedule configured it also mails the weekly report.
package sink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/daemon"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
)

// Config of the report service.
type Config struct {
	Engine engine.Config
	// Group is the consumer group (durable name) shared by report replicas.
	Group string
	// BatchSize is the findings written in one insert. The findings of one bus message go
	// into one insert, so an insert may exceed it by one message's findings.
	BatchSize int
	// MaxWait is the longest a received finding waits for its batch to fill.
	MaxWait time.Duration
	// AckWait is how long the bus waits for an acknowledgement before redelivering; writes
	// that keep failing for longer get redelivered duplicates, which count once.
	AckWait time.Duration
	// RetryMin and RetryMax bound the backoff while ClickHouse is unavailable.
	RetryMin, RetryMax time.Duration
	// DrainTimeout bounds the last write at shutdown.
	DrainTimeout time.Duration
	// MaxFindingBytes caps one message; larger ones go to the dead-letter stream.
	MaxFindingBytes int
	// Weekly is the weekly report schedule; it runs when it has a schedule and recipients.
	Weekly schedule.Config
}

// RegisterFlags adds the service's flags to fs; defaultDataDir is the root data directory.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaultDataDir string) {
	c.Engine.RegisterFlags(fs, defaultDataDir)
	fs.StringVar(&c.Group, "consumer-group", "report", "bus consumer `group` shared by report replicas")
	fs.IntVar(&c.BatchSize, "batch-size", DefaultBatchSize, "findings per ClickHouse insert (a bus message is never split, so one insert may exceed it by one message)")
	fs.DurationVar(&c.MaxWait, "batch-max-wait", time.Second, "longest a finding waits for its batch to fill before it is written")
	fs.DurationVar(&c.AckWait, "ack-wait", 5*time.Minute, "bus redelivers a finding not acknowledged within this time (while ClickHouse is down)")
	fs.DurationVar(&c.RetryMin, "retry-min", 200*time.Millisecond, "first wait before retrying a failed ClickHouse write")
	fs.DurationVar(&c.RetryMax, "retry-max", 30*time.Second, "longest wait between retries of a failed ClickHouse write")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "at shutdown, how long the last batch may take to write")
	fs.IntVar(&c.MaxFindingBytes, "max-finding-bytes", 1<<20, "larger messages go to the dead-letter stream")
	c.Weekly.RegisterFlags(fs)
}

// Validate checks the flags and fills defaults.
func (c *Config) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if c.Group == "" {
		c.Group = "report"
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 1_000_000:
		return fmt.Errorf("--batch-size %d: want 1 to 1000000", c.BatchSize)
	case c.MaxWait <= 0:
		return fmt.Errorf("--batch-max-wait %s: want a positive duration", c.MaxWait)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("--retry-min %s, --retry-max %s: want 0 < min <= max", c.RetryMin, c.RetryMax)
	}
	if c.AckWait <= 0 {
		c.AckWait = 5 * time.Minute
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.MaxFindingBytes <= 0 {
		c.MaxFindingBytes = 1 << 20
	}
	if c.Weekly.Enabled() {
		if err := c.Weekly.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// DefaultBatchSize is the default of --batch-size. ClickHouse 18.16 spent 12-18 us of CPU
// per row on 10k-row inserts into findings and its three rollups, 6-8 us on 20k-50k rows and
// 4-5 us on 100k (fewer parts to write and merge); end to end 100k gave no more than 50k and
// holds twice the memory (a 50k block is ~40 MB).
const DefaultBatchSize = 50000

// New opens the store (a server is contacted only when the writer runs) and returns the
// service's components: the findings writer, then the weekly schedule when configured.
func New(c Config, d daemon.Deps) ([]daemon.Component, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if d.Bus == nil {
		return nil, errors.New("no bus")
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := c.Engine.Open(context.Background())
	if err != nil {
		return nil, err
	}
	var reg prometheus.Registerer // a nil *Registry must not become a non-nil interface
	if d.Registry != nil {
		reg = d.Registry
	}
	w, err := NewWriter(c, st, d.Bus, log, reg)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	comps := []daemon.Component{w}
	if c.Weekly.Enabled() {
		sch, err := schedule.New(c.Weekly, st.DB(), st, d.Cluster, log)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		comps = append(comps, sch)
	}
	// Last to stop: the store outlives every component that uses it.
	comps = append(comps, daemon.CloseAtStop(st))
	log.Info("report configured", "engine", c.Engine.Describe(), "batch_size", c.BatchSize,
		"batch_max_wait", c.MaxWait, "weekly_schedule", c.Weekly.Enabled())
	return comps, nil
}

// Writer consumes findings and writes them in batches into a store it does not close.
type Writer struct {
	cfg Config
	st  *store.Store
	bus bus.Bus
	log *slog.Logger
	m   metrics

	ready atomic.Pointer[error]
	// hook, when set (tests), runs before every write attempt.
	hook func()
}

type metrics struct {
	written, invalid, deadLettered, writeErrors, unwritten, ackErrors prometheus.Counter
	batches                                                           prometheus.Counter
	batchSize, writeSeconds                                           prometheus.Histogram
	pending                                                           prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_written_total",
			Help: "Findings written to ClickHouse (redeliveries included; they count once in queries)."}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_findings_invalid_total",
			Help: "Messages, or findings in a batch message, that were not a usable finding (undecodable, too large, without identity)."}),
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
	}
	if reg != nil {
		reg.MustRegister(m.written, m.ackErrors, m.invalid, m.deadLettered, m.writeErrors, m.unwritten, m.batches, m.batchSize, m.writeSeconds, m.pending)
	}
	return m
}

// NewWriter makes the writer of findings from b into st. cfg must be validated.
func NewWriter(cfg Config, st *store.Store, b bus.Bus, log *slog.Logger, reg prometheus.Registerer) (*Writer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{cfg: cfg, st: st, bus: b, log: log, m: newMetrics(reg)}
	notYet := errors.New("report: schema not migrated yet")
	w.ready.Store(&notYet)
	return w, nil
}

// Ready implements daemon.Component: ready once the schema is migrated and while the last
// write succeeded.
func (w *Writer) Ready() error { return *w.ready.Load() }

func (w *Writer) setReady(err error) { w.ready.Store(&err) }

// batch is what one insert writes: the findings of whole bus messages, as a block, and the
// deliveries to acknowledge once the block is committed.
type batch struct {
	blk *store.Block
	ds  []*bus.Delivery
}

// inBuffer is how many deliveries wait between the bus and the decoder. A delivery can hold
// a batch of findings (up to --max-finding-bytes), so this is counted in messages, not findings.
const inBuffer = 1024

// reportMaxDeliver bounds redeliveries of one findings message: 10,000 x the 5-minute AckWait
// is about 35 days of ClickHouse outage before a message is given up to the dead-letter stream.
const reportMaxDeliver = 10000

// Run migrates the schema (retrying while ClickHouse is down), then consumes until ctx is
// cancelled; it then stops consuming, writes and acknowledges what it holds, and returns nil.
//
// One goroutine decodes and batches while another writes the previous batch, so at most two
// batches are held; while ClickHouse is down the write retries, batching stops, and the
// bus stops delivering once MaxUnacked messages are held (back-pressure, nothing dropped).
func (w *Writer) Run(ctx context.Context) error {
	if !w.migrate(ctx) {
		return nil
	}
	// Back-pressure comes from the handoff channel, never from the bus's unacknowledged
	// limit: a JetStream pull consumer that reaches MaxAckPending stalls until AckWait (seen
	// here as 30 s pauses), so the limit is set well above what the writer can hold (the
	// channel, the batch being filled, one queued and one being written, the client's
	// buffer), counting one finding per message, the smallest a message holds.
	in := make(chan *bus.Delivery, inBuffer)
	cons, err := w.bus.Consumer(bus.Findings, w.cfg.Group, bus.ConsumerOptions{
		MaxUnacked: max(10*w.cfg.BatchSize, 20000),
		AckWait:    w.cfg.AckWait,
		// A message this writer cannot decode is dead-lettered at once; one it cannot store
		// is held and redelivered every AckWait while ClickHouse is down. The bus's default
		// bound (50 deliveries, about 4 hours at 5 minutes) would dead-letter good findings
		// during a long outage, so report's bound covers weeks of it instead.
		MaxDeliver: reportMaxDeliver,
	})
	if err != nil {
		return fmt.Errorf("consume findings: %w", err)
	}
	cctx, stopConsume := context.WithCancel(context.Background())
	defer stopConsume()
	consumeErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		consumeErr <- cons.Consume(cctx, func(_ context.Context, d *bus.Delivery) {
			select {
			case in <- d:
			case <-cctx.Done():
				// Not acknowledged: redelivered to the next consumer.
			}
		})
	}()

	// The write stage; wctx ends only when the drain at shutdown runs out of time. A batch
	// is handed over only when the writer is free (a queued third batch would hold a third
	// of the memory more and gain nothing: the writer is the slower stage), and its block
	// comes back through free to be filled again.
	writes := make(chan batch)
	free := make(chan *store.Block, 1)
	wctx, stopWrites := context.WithCancel(context.Background())
	defer stopWrites()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for b := range writes {
			if !w.write(wctx, b) {
				w.m.unwritten.Add(float64(b.blk.Len()))
				w.m.pending.Sub(float64(b.blk.Len()))
				w.log.Warn("findings left unacknowledged at shutdown; the bus will redeliver them", "findings", b.blk.Len())
			}
			b.blk.Reset()
			select {
			case free <- b.blk:
			default:
			}
		}
	}()
	newBatch := func() batch {
		select {
		case blk := <-free:
			return batch{blk: blk}
		default:
			return batch{blk: new(store.Block)}
		}
	}

	cur := newBatch()
	var timer *time.Timer
	var timerC <-chan time.Time
	// flush hands the batch to the write stage; false when ctx ended while waiting for it
	// (the batch is then still held).
	flush := func() bool {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
		if len(cur.ds) == 0 {
			return true
		}
		select {
		case writes <- cur:
			cur = newBatch()
			return true
		case <-ctx.Done():
			return false
		}
	}
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-consumeErr:
			if err != nil {
				runErr = fmt.Errorf("consume findings: %w", err)
			}
			break loop
		case d := <-in:
			w.add(ctx, d, &cur)
			if timer == nil && len(cur.ds) > 0 {
				timer = time.NewTimer(w.cfg.MaxWait)
				timerC = timer.C
			}
			if cur.blk.Len() >= w.cfg.BatchSize && !flush() {
				break loop
			}
		case <-timerC:
			timer, timerC = nil, nil
			if !flush() {
				break loop
			}
		}
	}
	// Drain: stop the consumer first, then write everything received, within DrainTimeout.
	stopConsume()
	wg.Wait()
	deadline := time.AfterFunc(w.cfg.DrainTimeout, stopWrites)
	defer deadline.Stop()
	dctx := context.Background()
	for len(in) > 0 {
		w.add(dctx, <-in, &cur)
		if cur.blk.Len() >= w.cfg.BatchSize {
			writes <- cur
			cur = newBatch()
		}
	}
	if len(cur.ds) > 0 {
		writes <- cur
	}
	close(writes)
	<-writerDone
	w.log.Info("report writer stopped")
	return runErr
}

// migrate applies the schema, retrying with backoff until it works or ctx ends.
func (w *Writer) migrate(ctx context.Context) bool {
	bo := w.backoff()
	for {
		did, err := w.st.Migrate(ctx, store.MigrateOptions{RetentionDays: w.cfg.Engine.RetentionDays})
		if err == nil {
			if len(did) > 0 {
				w.log.Info("schema migrated", "applied", did)
			}
			w.setReady(nil)
			return true
		}
		w.setReady(err)
		wait := bo.next()
		w.log.Warn("clickhouse not usable yet, retrying", "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return false
		}
	}
}

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
	err := w.deadLetter(ctx, d.Cluster, id, "report:"+d.Position, d.Data, reason)
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
	err := w.deadLetter(ctx, d.Cluster, id+"#"+strconv.Itoa(i), "report:"+pos, f, reason)
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		w.log.Warn("dead letter refused for its size; dropping the finding", "position", pos)
	case err != nil:
		w.log.Warn("dead-letter publish failed; redelivering the message later", "position", pos, "err", err)
		return fmt.Errorf("%w: %w", errDeadLetterFailed, err)
	}
	return nil
}

// deadLetter publishes data to the dead-letter stream as "report/<id>" (bus.NewDeadLetter
// keeps its first bus.DeadLetterMaxData bytes) and counts it.
func (w *Writer) deadLetter(ctx context.Context, cluster, id, source string, data []byte, reason string) error {
	if bus.ValidateCluster(cluster) != nil {
		cluster = "unknown"
	}
	msg := bus.NewDeadLetter(cluster, "report", id, source, errors.New(reason), data, nil)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.bus.Publish(pctx, msg); err != nil {
		return err
	}
	w.m.deadLettered.Inc()
	return nil
}

// write inserts the batch, retrying with backoff until it succeeds (then acknowledges every
// message) or ctx ends (then leaves them unacknowledged and returns false).
func (w *Writer) write(ctx context.Context, b batch) bool {
	n := b.blk.Len()
	if n == 0 {
		return true
	}
	bo := w.backoff()
	for {
		if w.hook != nil {
			w.hook()
		}
		start := time.Now()
		err := w.st.WriteBlock(ctx, b.blk)
		if err == nil {
			w.m.writeSeconds.Observe(time.Since(start).Seconds())
			break
		}
		w.m.writeErrors.Inc()
		w.setReady(fmt.Errorf("clickhouse write failing: %w", err))
		if ctx.Err() != nil {
			return false
		}
		wait := bo.next()
		w.log.Warn("clickhouse write failed; holding the batch and retrying", "findings", n, "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return false
		}
	}
	w.setReady(nil)
	for _, d := range b.ds {
		if err := d.Ack(ctx); err != nil {
			w.m.ackErrors.Inc()
			w.log.Debug("ack failed; the findings will be redelivered and counted once", "position", d.Position, "err", err)
		}
	}
	w.m.written.Add(float64(n))
	w.m.batches.Inc()
	w.m.batchSize.Observe(float64(n))
	w.m.pending.Sub(float64(n))
	return true
}

type backoff struct {
	min, max, cur time.Duration
}

func (w *Writer) backoff() *backoff { return &backoff{min: w.cfg.RetryMin, max: w.cfg.RetryMax} }

// next returns the next wait: doubling from min to max, with up to 20% jitter.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur + time.Duration(rand.Int64N(int64(b.cur)/5+1))
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
