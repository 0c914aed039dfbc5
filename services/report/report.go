// Package report is the report service: it wires the findings writer (bus -> ClickHouse) and,
// when configured, the weekly report's schedule onto one store.
package report

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/kubeclient"
	"github.com/auditlens/auditlens/services/report/page"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/readiness/status"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
	"github.com/auditlens/auditlens/services/report/writer"
)

// Config is everything the service needs; its zero value is not useful: start from
// DefaultConfig.
type Config struct {
	// Engine is the store: a ClickHouse server, or embedded chDB.
	Engine engine.Config
	// Writer consumes findings and writes them in batches.
	Writer writer.Config
	// Rollup turns each day's finding states into plain per-day counts.
	Rollup rollup.Config
	// Weekly is the weekly report's schedule; it runs when it has a schedule and recipients.
	Weekly schedule.Config
	// Page serves the web console (/, /report and its drill-down pages) on its own
	// listeners (Console), never on --metrics-addr.
	Page bool
	// Console is where and to whom the console is served.
	Console ConsoleConfig
	// Readiness is the upgrade readiness gate: its API on the console's listeners
	// (readiness.APIPath), its metrics, and the UpgradeReadiness objects.
	Readiness readiness.Config
	// ReadinessObjects keeps UpgradeReadiness objects current in a Kubernetes cluster.
	ReadinessObjects status.Config
	// Files are the accepted risks and the owners.
	Files FilesConfig
	// Kube is the apiserver of the UpgradeReadiness objects and the namespace labels.
	Kube kubeclient.Config
	// Releases are the Kubernetes releases the rule catalogue names, offered as target
	// versions by the console (with those the findings name); set by a caller that has the
	// catalogue, not a flag.
	Releases []weekly.Version
}

// DefaultConfig is the one place the service's defaults are written: the flags show and start
// from these values. Embedded ClickHouse keeps its data in dataRoot/chdb.
func DefaultConfig(dataRoot string) Config {
	return Config{
		Engine:  engine.DefaultConfig(dataRoot),
		Writer:  writer.DefaultConfig(),
		Rollup:  rollup.DefaultConfig(),
		Weekly:  schedule.DefaultConfig(),
		Page:    true,
		Console: DefaultConsoleConfig(),

		Readiness: readiness.DefaultConfig(),
		Files:     DefaultFilesConfig(),
	}
}

// RegisterFlags registers the service's flags on fs, each defaulting to the current value of
// its field: the engine's (--clickhouse-*, --retention-days), the writer's (--report-*) and
// the weekly schedule's (--weekly-*, --target-version, --smtp-*, --mail-*).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Engine.RegisterFlags(fs)
	c.Writer.RegisterFlags(fs)
	c.Rollup.RegisterFlags(fs)
	c.Weekly.RegisterFlags(fs)
	fs.BoolVar(&c.Page, "report-page", c.Page, "serve the web console (/, the weekly report at /report, callers and requests) on --report-console-addr and --report-console-auth-addr")
	c.Console.RegisterFlags(fs)
	c.Readiness.RegisterFlags(fs)
	c.ReadinessObjects.RegisterFlags(fs)
	c.Files.RegisterFlags(fs)
	c.Kube.RegisterFlags(fs)
}

// Validate checks c and never changes it.
func (c Config) Validate() error {
	if err := c.Engine.Validate(); err != nil {
		return err
	}
	if err := c.Writer.Validate(); err != nil {
		return err
	}
	if err := c.Rollup.Validate(); err != nil {
		return err
	}
	if err := c.Weekly.Validate(); err != nil {
		return err
	}
	if err := c.Readiness.Validate(); err != nil {
		return err
	}
	if err := c.Kube.Validate(); err != nil {
		return err
	}
	if err := c.Files.Validate(); err != nil {
		return err
	}
	if c.ReadinessObjects.Enabled && c.Readiness.Interval == 0 {
		return errors.New("--readiness-objects needs a --readiness-interval")
	}
	if !c.Page {
		return nil
	}
	return c.Console.Validate()
}

// New opens the store (a server is contacted only when the writer runs) and returns the
// service's components, upstream first: the findings writer, the compaction of the finding
// days, the weekly schedule when configured, and last the store's closer.
func New(cfg Config, d daemon.Deps) ([]daemon.Component, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := cfg.Engine.Open(context.Background())
	if err != nil {
		return nil, err
	}
	var reg prometheus.Registerer // a nil *Registry must not become a non-nil interface
	if d.Registry != nil {
		reg = d.Registry
	}
	files, err := OpenFiles(cfg.Files, cfg.Kube, log, reg)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	wc := cfg.Writer
	wc.RetentionDays = cfg.Engine.RetentionDays
	wc.CountsRetentionDays = cfg.Engine.CountsRetentionDays
	w, err := writer.New(wc, st, d.Bus, log, reg)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	// What reads the store starts once the writer has applied the schema.
	comps := []daemon.Component{w, afterSchema(w, rollup.NewCompactor(cfg.Rollup, st.DB(), st.Table("findings"), st,
		st.Lease("compact", cfg.Rollup.LeaseTTL()), log, reg)),
		afterSchema(w, newExpirer(st, log, reg))}
	if cfg.Weekly.Enabled() {
		sch, err := schedule.New(cfg.Weekly, st.DB(), st, d.Cluster, log)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		files.Weekly(sch.Delivery())
		comps = append(comps, sch)
	}
	var pub readiness.Publisher
	if cfg.ReadinessObjects.Enabled {
		rc, err := cfg.Kube.REST()
		if err == nil {
			pub, err = status.New(rc)
		}
		if err != nil {
			_ = st.Close()
			return nil, err
		}
	}
	gate, err := readiness.NewGate(cfg.Readiness, st.DB(), cfg.Weekly.Target, files.Acceptor, pub, log, reg)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	comps = append(comps, afterSchema(w, gate))
	if wt := files.Watcher(cfg.Files.Reload); wt != nil {
		comps = append(comps, wt)
	}
	if cfg.Page && (cfg.Console.Addr != "" || cfg.Console.AuthAddr != "") {
		// On embedded ClickHouse this shares the writer's session (chDB allows one per
		// process): the page reads while the writer writes.
		h := &page.Handler{DB: st.DB(), Cluster: d.Cluster, DefaultTarget: cmp.Or(cfg.Weekly.Target, schedule.DefaultTarget), Releases: cfg.Releases, Log: log,
			Limits: cfg.Console.Page, Deadline: store.WithDeadline, Accept: files.Acceptor, Owners: files.teamFilter()}
		if reg != nil {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_report_console_requests_shared_total",
				Help: "Console requests answered from another request's read of the same page, under way when they came, for a user decided the same on every cluster it looked at."},
				func() float64 { return float64(h.Shared()) }))
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "auditlens_report_console_reads_shared_total",
				Help: "Store reads of console pages answered from another page's read of the same query, under way when they asked: users of two kinds share the reads of the clusters both may see."},
				func() float64 { return float64(h.SharedReads()) }))
		}
		mux := http.NewServeMux()
		h.Register(mux)
		mux.Handle(readiness.APIPath, gate.Handler())
		srv, err := newConsoleServer(cfg.Console, cfg.Kube, mux, log)
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		comps = append(comps, srv)
	}
	// Last to stop: the store outlives every component that uses it.
	comps = append(comps, daemon.CloseAtStop(st))
	log.Info("report configured", "engine", cfg.Engine.Describe(), "batch_size", cfg.Writer.BatchSize,
		"batch_max_wait", cfg.Writer.MaxWait, "weekly_schedule", cfg.Weekly.Enabled())
	return comps, nil
}

// afterSchema runs c once w has applied the schema (or not at all when ctx ends first): the
// compaction and the readiness judgement of a first start would otherwise query tables that do
// not exist yet and log ClickHouse's "unknown table" before the migration.
func afterSchema(w *writer.Writer, c daemon.Component) daemon.Component {
	return daemon.ComponentFuncs{
		RunFunc: func(ctx context.Context) error {
			select {
			case <-w.Migrated():
				return c.Run(ctx)
			case <-ctx.Done():
				return nil
			}
		},
		ReadyFunc: c.Ready,
	}
}
