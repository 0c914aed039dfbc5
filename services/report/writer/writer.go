// Package writer consumes findings from the bus, writes them to ClickHouse in batches and
// acknowledges each message only after the insert holding its findings was committed.
package writer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/store"
)

// Config of the writer.
type Config struct {
	// Group is the consumer group (durable name) shared by report replicas.
	Group string
	// BatchSize is the findings written in one insert. The findings of one bus message go
	// into one insert, so an insert may exceed it by one message's findings.
	BatchSize int
	// MaxWait is the longest a received finding waits for its batch to fill.
	MaxWait time.Duration
	// AckWait is the recovery time after a crash: how long the findings a stopped report
	// held wait before the bus redelivers them. A running report keeps what it holds for as
	// long as ClickHouse is down (bus.ConsumerOptions.AckWait); only messages still in the
	// bus client's buffer behind a full writer may come again meanwhile, counted once.
	AckWait time.Duration
	// RetryMin and RetryMax bound the backoff while ClickHouse is unavailable.
	RetryMin, RetryMax time.Duration
	// DrainTimeout bounds the last write at shutdown.
	DrainTimeout time.Duration
	// MaxFindingBytes caps one message; larger ones go to the dead-letter stream.
	MaxFindingBytes int
	// RetentionDays of findings and of everything that names a caller, applied by the schema
	// migration at start; 0 keeps them forever. A finding or migration sighting older than it
	// is not written (counted in auditlens_report_findings_expired_total): its rollup rows
	// would outlive it. Not a flag of the writer's: the service sets it from the engine's
	// --retention-days.
	RetentionDays int
	// CountsRetentionDays of the counts without callers (--counts-retention-days).
	CountsRetentionDays int
}

// DefaultBatchSize is the default of --report-batch-size. ClickHouse 18.16 spent 12-18 us of
// CPU per row on 10k-row inserts into findings and its three rollups, 6-8 us on 20k-50k rows
// and 4-5 us on 100k (fewer parts to write and merge); end to end 100k gave no more than 50k
// and holds twice the memory (a 50k block is ~40 MB).
const DefaultBatchSize = 50000

// DefaultConfig is the writer's configuration when no flag changes it.
func DefaultConfig() Config {
	return Config{
		Group:           "report",
		BatchSize:       DefaultBatchSize,
		MaxWait:         500 * time.Millisecond,
		AckWait:         10 * time.Second,
		RetryMin:        200 * time.Millisecond,
		RetryMax:        5 * time.Second,
		DrainTimeout:    30 * time.Second,
		MaxFindingBytes: 1 << 20,
	}
}

// deprecated maps the writer's flags before the --report- prefix to their names now.
var deprecated = [][2]string{
	{"consumer-group", "report-consumer-group"},
	{"batch-size", "report-batch-size"},
	{"batch-max-wait", "report-batch-max-wait"},
	{"ack-wait", "report-ack-wait"},
	{"retry-min", "report-retry-min"},
	{"retry-max", "report-retry-max"},
	{"drain-timeout", "report-drain-timeout"},
	{"max-finding-bytes", "report-max-finding-bytes"},
}

// RegisterFlags adds the --report-* flags of the writer to fs, each defaulting to the current
// value of its field, and their names before the prefix as deprecated aliases (each unless fs
// already has a flag of that name).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Group, "report-consumer-group", c.Group, "bus consumer `group` shared by report replicas")
	fs.IntVar(&c.BatchSize, "report-batch-size", c.BatchSize, "findings per ClickHouse insert (a bus message is never split, so one insert may exceed it by one message)")
	fs.DurationVar(&c.MaxWait, "report-batch-max-wait", c.MaxWait, "longest a finding waits for its batch to fill before it is written")
	fs.DurationVar(&c.AckWait, "report-ack-wait", c.AckWait, "after a crash, how long the findings it held wait before they are redelivered (a running report keeps what it holds while ClickHouse is down)")
	fs.DurationVar(&c.RetryMin, "report-retry-min", c.RetryMin, "first wait before retrying a failed ClickHouse write")
	fs.DurationVar(&c.RetryMax, "report-retry-max", c.RetryMax, "longest wait between retries of a failed ClickHouse write (after ClickHouse comes back, findings are written within this)")
	fs.DurationVar(&c.DrainTimeout, "report-drain-timeout", c.DrainTimeout, "at shutdown, how long the last batch may take to write")
	fs.IntVar(&c.MaxFindingBytes, "report-max-finding-bytes", c.MaxFindingBytes, "larger messages go to the dead-letter stream")
	for _, d := range deprecated {
		flagenv.Deprecated(fs, d[0], d[1])
	}
}

// Validate checks c; it changes nothing.
func (c Config) Validate() error {
	switch {
	case c.Group == "":
		return errors.New("--report-consumer-group is empty")
	case c.BatchSize < 1 || c.BatchSize > 1_000_000:
		return fmt.Errorf("--report-batch-size %d: want 1 to 1000000", c.BatchSize)
	case c.MaxWait <= 0:
		return fmt.Errorf("--report-batch-max-wait %s: want a positive duration", c.MaxWait)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("--report-retry-min %s, --report-retry-max %s: want 0 < min <= max", c.RetryMin, c.RetryMax)
	case c.AckWait <= 0:
		return fmt.Errorf("--report-ack-wait %s: want a positive duration", c.AckWait)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("--report-drain-timeout %s: want a positive duration", c.DrainTimeout)
	case c.MaxFindingBytes <= 0:
		return fmt.Errorf("--report-max-finding-bytes %d: want more than 0", c.MaxFindingBytes)
	}
	return nil
}

// Writer consumes findings and writes them in batches into a store it does not close.
type Writer struct {
	cfg Config
	st  *store.Store
	bus bus.Bus
	log *slog.Logger
	m   metrics

	ready        atomic.Pointer[error]
	migrated     chan struct{} // closed once the schema is applied
	migratedOnce sync.Once
	// now is the clock event times are judged by (MaxAhead); tests set theirs.
	now func() time.Time
	// reviews remembers the review sightings written, so that each cluster's catalogue
	// release is written once a day, not with every heartbeat.
	reviews reviewed
	// expired sums what arrived older than the retention, for its log line.
	expired expiredLog
}

// reviewed holds the days (per cluster and catalogue release) whose review sighting was
// written.
type reviewed struct {
	mu   sync.Mutex
	days map[string]bool
}

// maxReviewed bounds reviewed's keys; past it, it starts again (a day written twice).
const maxReviewed = 100_000

func reviewKey(r store.ReviewSighting) string {
	return fmt.Sprintf("%s\x00%s\x00%d", r.Cluster, r.Through, r.Seen.Unix()/86400)
}

// fresh reports whether r's day was not written yet for its cluster and release.
func (v *reviewed) fresh(r store.ReviewSighting) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.days[reviewKey(r)]
}

// written records rs as written.
func (v *reviewed) written(rs []store.ReviewSighting) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.days == nil || len(v.days) >= maxReviewed {
		v.days = map[string]bool{}
	}
	for _, r := range rs {
		v.days[reviewKey(r)] = true
	}
}

// New makes the writer of findings from b into st, which it does not close.
func New(cfg Config, st *store.Store, b bus.Bus, log *slog.Logger, reg prometheus.Registerer) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errors.New("no bus")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{cfg: cfg, st: st, bus: b, log: log, m: newMetrics(reg), now: time.Now, migrated: make(chan struct{})}
	notYet := errors.New("report: schema not migrated yet")
	w.ready.Store(&notYet)
	return w, nil
}

// Ready implements daemon.Component: ready once the schema is migrated and while the last
// write succeeded.
func (w *Writer) Ready() error { return *w.ready.Load() }

func (w *Writer) setReady(err error) { w.ready.Store(&err) }

// Migrated is closed once Run has applied the schema: what reads the store waits for it, so a
// first start logs no "unknown table".
func (w *Writer) Migrated() <-chan struct{} { return w.migrated }

// batch is what one write stores: the findings of whole bus messages, as a block, the
// minutes and control-plane sightings of classify's heartbeats, and the deliveries to
// acknowledge once all are committed.
type batch struct {
	blk   *store.Block
	beats []store.EventMinute
	// heartbeats counts the heartbeat messages of the batch.
	heartbeats int
	sightings  []store.ControlPlaneSighting
	coverage   []store.CoverageSighting
	moves      []store.MigrationSighting
	reviews    []store.ReviewSighting
	ds         []*bus.Delivery
}

// inBuffer is how many deliveries wait between the bus and the decoder. A delivery can hold
// a batch of findings (up to --report-max-finding-bytes), so this is counted in messages, not findings.
const inBuffer = 1024

// reportMaxDeliver bounds redeliveries of one findings message. A running report keeps what it
// holds, so a message comes again only after a crash of its holder, or when it waited in the
// bus client's buffer behind a writer held up by a ClickHouse outage (once per AckWait, about
// 28 hours of outage at 10 s): both far from this bound.
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
		// is held while ClickHouse is down. The bus's default bound (50 deliveries) could
		// dead-letter good findings that wait in the client's buffer during a long outage
		// (see reportMaxDeliver), so report's bound is far above it.
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
	bo := w.retry()
	for attempt := 1; ; attempt++ {
		did, err := w.st.Migrate(ctx, store.MigrateOptions{RetentionDays: w.cfg.RetentionDays, CountsRetentionDays: w.cfg.CountsRetentionDays})
		if err == nil {
			if len(did) > 0 {
				w.log.Info("schema migrated", "applied", did)
			}
			w.setReady(nil)
			w.migratedOnce.Do(func() { close(w.migrated) })
			return true
		}
		w.setReady(err)
		wait := bo.Delay(attempt)
		w.log.Warn("clickhouse not usable yet, retrying", "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return false
		}
	}
}

// write inserts the batch, retrying with backoff until it succeeds (then acknowledges every
// message) or ctx ends (then leaves them unacknowledged and returns false).
func (w *Writer) write(ctx context.Context, b batch) bool {
	n := b.blk.Len()
	if n == 0 && len(b.ds) == 0 {
		return true
	}
	bo := w.retry()
	// Every attempt sends the same rows: a write that failed after some shards (or a replica)
	// stored their part is then stored once (replicated block de-duplication). The findings
	// go first, then the heartbeats' minutes, then their sightings; what was written is not
	// sent again when only what follows it failed.
	ingested := time.Now()
	findingsDone, minutesDone := n == 0, len(b.beats) == 0
	for attempt := 1; ; attempt++ {
		start := time.Now()
		var err error
		if !findingsDone {
			if err = w.st.WriteBlockAt(ctx, b.blk, ingested); err == nil {
				findingsDone = true
				w.m.writeSeconds.Observe(time.Since(start).Seconds())
			}
		}
		if err == nil && !minutesDone {
			if err = w.st.WriteEventMinutes(ctx, b.beats); err == nil {
				minutesDone = true
			}
		}
		if err == nil && len(b.sightings) > 0 {
			err = w.st.WriteControlPlaneSightings(ctx, b.sightings)
		}
		if err == nil && len(b.coverage) > 0 {
			// Written again with the sightings when this fails: both keep the newest minute.
			err = w.st.WriteCoverageSightings(ctx, b.coverage)
		}
		if err == nil && len(b.moves) > 0 {
			err = w.st.WriteMigrationSightings(ctx, b.moves)
		}
		if err == nil && len(b.reviews) > 0 {
			if err = w.st.WriteReviewSightings(ctx, b.reviews); err == nil {
				w.reviews.written(b.reviews)
			}
		}
		if err == nil {
			break
		}
		w.m.writeErrors.Inc()
		w.setReady(fmt.Errorf("clickhouse write failing: %w", err))
		if ctx.Err() != nil {
			return false
		}
		wait := bo.Delay(attempt)
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
	w.m.eventMinutes.Add(float64(len(b.beats)))
	w.m.heartbeats.Add(float64(b.heartbeats))
	w.m.sightings.Add(float64(len(b.sightings) + len(b.coverage) + len(b.moves)))
	if n == 0 {
		return true
	}
	w.m.written.Add(float64(n))
	w.m.batches.Inc()
	w.m.batchSize.Observe(float64(n))
	w.m.pending.Sub(float64(n))
	return true
}

// retry is the schedule of failed migrations and writes.
func (w *Writer) retry() backoff.Backoff {
	return backoff.Backoff{Min: w.cfg.RetryMin, Max: w.cfg.RetryMax}
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
