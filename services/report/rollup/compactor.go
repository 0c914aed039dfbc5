package rollup

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config is the compaction's schedule.
type Config struct {
	// Interval is how often Compact runs; 0 never (every day is then read from its states:
	// exact, but slower over long windows).
	Interval time.Duration
}

// DefaultConfig compacts every minute.
func DefaultConfig() Config { return Config{Interval: time.Minute} }

// RegisterFlags registers --report-rollup-interval.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Interval, "report-rollup-interval", c.Interval, "how often report turns the finding states of each day that is over into plain per-day counts (what the console, the weekly report and the readiness gate read over long windows); 0: never")
}

// Validate checks c.
func (c Config) Validate() error {
	if c.Interval < 0 {
		return fmt.Errorf("--report-rollup-interval %s: want 0 or more", c.Interval)
	}
	return nil
}

// Lease lets one of the report processes that share a store compact it (store.Lease).
type Lease interface {
	// Hold reports whether this process holds the lease, taking or renewing it, and the
	// holder found.
	Hold(ctx context.Context) (bool, string, error)
	// Release gives it up.
	Release(ctx context.Context) error
}

// Compactor runs Compact every Interval: a daemon.Component. With a Lease, only the report
// process that holds it compacts and cleans; the others take over when it stops.
type Compactor struct {
	cfg    Config
	db     *sql.DB
	tables Tables
	log    *slog.Logger
	lease  Lease
	// holding is whether this process held the lease at its last round, holder who did.
	holding atomic.Bool
	holder  string

	built, prefixes, failed prometheus.Counter
	last, held              prometheus.Gauge

	// st deletes superseded builds; nil: never.
	st        Store
	cleanedAt time.Time
	cleaned   prometheus.Counter
}

// Store is what the compactor changes in the store beside its queries (store.Store).
type Store interface {
	// DeleteBuilds deletes the rows of builds from a table (Clean).
	DeleteBuilds(ctx context.Context, table string, ids []uint64) error
}

// cleanEvery is how often the compactor removes the builds replaced (Clean).
const cleanEvery = time.Hour

// LeaseTTL is how long a compacting process's lease lasts past each round: three rounds, so
// that a slow round does not hand it over, and at least 30 seconds.
func (c Config) LeaseTTL() time.Duration { return max(3*c.Interval, 30*time.Second) }

// NewCompactor returns the compaction of the day tables beside findings (see TablesFor),
// which removes replaced builds through st (nil: never), while it
// holds lease (nil: always).
func NewCompactor(cfg Config, db *sql.DB, findings string, st Store, lease Lease, log *slog.Logger, reg prometheus.Registerer) *Compactor {
	c := &Compactor{cfg: cfg, db: db, tables: TablesFor(findings), log: log, st: st, lease: lease,
		built: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_days_built_total",
			Help: "Cluster days whose finding states were turned into plain per-day counts."}),
		prefixes: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_prefixes_built_total",
			Help: "Builds of the first hours of a cluster's day under way into plain counts (one per cluster and hour at most, more when late findings change an hour built)."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_errors_total",
			Help: "Compactions, and removals of replaced builds, that failed (the days stay readable from their states)."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "auditlens_report_rollup_last_success_timestamp_seconds",
			Help: "When a compaction last completed."}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_builds_removed_total",
			Help: "Day builds whose rows were deleted because a newer build of the same cluster day replaced them (rollup.CleanAfter ago or more)."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "auditlens_report_rollup_lease_held",
			Help: "1 when this report process holds the store's compaction lease (one process of those sharing a store compacts), else 0."}),
	}
	if reg != nil {
		reg.MustRegister(c.built, c.prefixes, c.failed, c.last, c.held, c.cleaned)
	}
	return c
}

// Held reports whether this process compacted at its last round.
func (c *Compactor) Held() bool { return c.holding.Load() }

// hold reports whether this process compacts this round (it holds the lease), logging when
// that changes.
func (c *Compactor) hold(ctx context.Context) bool {
	if c.lease == nil {
		c.holding.Store(true)
		c.held.Set(1)
		return true
	}
	ok, holder, err := c.lease.Hold(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.failed.Inc()
			c.log.Warn("reading the compaction lease failed; the next round tries again", "err", err)
		}
		return false
	}
	was := c.holding.Load()
	switch {
	case ok && !was:
		c.log.Info("this report process compacts the store (it holds the compaction lease)", "previous", c.holder)
	case !ok && (was || holder != c.holder):
		c.log.Info("another report process compacts the store", "holder", holder)
	}
	c.holding.Store(ok)
	c.holder = holder
	if ok {
		c.held.Set(1)
	} else {
		c.held.Set(0)
	}
	return ok
}

// release gives the lease up when the process stops, so that another takes it over at once.
func (c *Compactor) release() {
	if c.lease == nil || !c.holding.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.lease.Release(ctx); err != nil {
		c.log.Warn("releasing the compaction lease failed; another process takes it over when it runs out", "err", err)
	}
	c.holding.Store(false)
	c.held.Set(0)
}

// Run compacts at once (the days an upgrade's migration filled), then every Interval, until
// ctx ends. A failure is logged and counted; the next round tries again.
func (c *Compactor) Run(ctx context.Context) error {
	if c.cfg.Interval == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	defer c.release()
	for {
		if !c.hold(ctx) {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				continue
			}
		}
		start := time.Now()
		n, err := Compact(ctx, c.db, c.tables)
		c.built.Add(float64(n.Days))
		c.prefixes.Add(float64(n.Prefixes))
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			c.failed.Inc()
			c.log.Warn("compacting the finding days failed; they stay readable from their states", "days", n.Days, "prefixes", n.Prefixes, "err", err)
		default:
			c.last.SetToCurrentTime()
			if n.Days+n.Prefixes > 0 {
				c.log.Info("compacted finding days", "days", n.Days, "prefixes", n.Prefixes, "took", time.Since(start).Round(time.Millisecond))
			}
			c.clean(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// clean runs Clean once every cleanEvery, for at most two minutes (on a cluster, deleting
// waits for every server: a server down fails it, and the next hour tries again).
func (c *Compactor) clean(ctx context.Context) {
	if c.st == nil || time.Since(c.cleanedAt) < cleanEvery {
		return
	}
	c.cleanedAt = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := Clean(cctx, c.db, c.tables, c.st.DeleteBuilds)
	cancel()
	c.cleaned.Add(float64(n))
	switch {
	case err != nil:
		c.failed.Inc()
		c.log.Warn("removing replaced day builds failed; the next hour tries again", "err", err)
	case n > 0:
		c.log.Info("removed the rows of replaced day builds", "builds", n)
	}
}

// Ready implements daemon.Component: compaction never holds the service back.
func (c *Compactor) Ready() error { return nil }
