package rollup

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
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

// Compactor runs Compact every Interval: a daemon.Component.
type Compactor struct {
	cfg    Config
	db     *sql.DB
	tables Tables
	log    *slog.Logger

	built, prefixes, failed prometheus.Counter
	last                    prometheus.Gauge

	// drop drops a month of a table (store.Store.DropMonth); nil prunes nothing.
	drop   func(ctx context.Context, table string, month uint32) error
	pruned time.Time
}

// pruneEvery is how often the compactor prunes the hour tables (see Prune).
const pruneEvery = time.Hour

// NewCompactor returns the compaction of the day tables beside findings (see TablesFor),
// which prunes the hour tables through drop (store.Store.DropMonth; nil: never).
func NewCompactor(cfg Config, db *sql.DB, findings string, drop func(ctx context.Context, table string, month uint32) error,
	log *slog.Logger, reg prometheus.Registerer) *Compactor {
	c := &Compactor{cfg: cfg, db: db, tables: TablesFor(findings), log: log, drop: drop,
		built: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_days_built_total",
			Help: "Cluster days whose finding states were turned into plain per-day counts."}),
		prefixes: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_prefixes_built_total",
			Help: "Builds of the first hours of a cluster's day under way into plain counts (one per cluster and hour at most, more when late findings change an hour built)."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_report_rollup_errors_total",
			Help: "Compactions, and prunings of the hour tables, that failed (the days stay readable from their states)."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "auditlens_report_rollup_last_success_timestamp_seconds",
			Help: "When a compaction last completed."}),
	}
	if reg != nil {
		reg.MustRegister(c.built, c.prefixes, c.failed, c.last)
	}
	return c
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
	for {
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
			c.prune(ctx)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// prune runs Prune once every pruneEvery, for at most two minutes (on a cluster, dropping
// waits for every server: a server down fails it, and the next hour tries again).
func (c *Compactor) prune(ctx context.Context) {
	if c.drop == nil || time.Since(c.pruned) < pruneEvery {
		return
	}
	c.pruned = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	months, err := Prune(ctx, c.db, c.tables, c.drop)
	switch {
	case err != nil:
		c.failed.Inc()
		c.log.Warn("pruning the finding hours failed; the next hour tries again", "dropped", months, "err", err)
	case len(months) > 0:
		c.log.Info("pruned the finding hours", "months", months)
	}
}

// Ready implements daemon.Component: compaction never holds the service back.
func (c *Compactor) Ready() error { return nil }
