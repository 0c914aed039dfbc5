package readiness

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/services/report/weekly"
)

// Config is the gate inside the report service: which clusters and targets it keeps judged,
// how often, and over which window.
type Config struct {
	// Targets are the target versions judged; empty: the weekly report's target.
	Targets Versions
	// Clusters are judged even when silent; the clusters with events or findings in the last
	// 30 days are judged too.
	Clusters   List
	Window     time.Duration
	MaxSilence time.Duration
	// Interval between two judgements of every cluster and target; 0: only on request.
	Interval time.Duration
}

// DefaultConfig is the gate's configuration when no flag changes it.
func DefaultConfig() Config {
	return Config{Window: DefaultWindow, MaxSilence: DefaultMaxSilence, Interval: 5 * time.Minute}
}

// RegisterFlags registers the --readiness-* flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.Targets, "readiness-target-versions", "comma-separated Kubernetes `versions` X.Y the upgrade readiness gate judges (default: --target-version)")
	fs.Var(&c.Clusters, "readiness-clusters", "comma-separated `clusters` the gate judges even when their audit stream is silent (those with events or findings in the last 30 days are judged anyway)")
	fs.DurationVar(&c.Window, "readiness-window", c.Window, "how far back the gate looks for blockers")
	fs.DurationVar(&c.MaxSilence, "readiness-max-silence", c.MaxSilence, "the longest stretch of the window without events (classify's heartbeats) or findings from a cluster before its gate is unknown")
	fs.DurationVar(&c.Interval, "readiness-interval", c.Interval, "how often the gate judges every cluster and target (metrics, UpgradeReadiness objects); 0: only on request")
}

// Validate checks c and never changes it.
func (c Config) Validate() error {
	if c.Window < time.Minute || c.MaxSilence < time.Minute {
		return fmt.Errorf("--readiness-window %s and --readiness-max-silence %s: want at least 1m each", c.Window, c.MaxSilence)
	}
	if c.MaxSilence > c.Window {
		return fmt.Errorf("--readiness-max-silence %s is longer than --readiness-window %s", c.MaxSilence, c.Window)
	}
	if c.Interval < 0 {
		return fmt.Errorf("--readiness-interval %s: want 0 or more", c.Interval)
	}
	return nil
}

// Versions is a comma-separated list of target versions (a flag.Value).
type Versions []weekly.Version

func (v *Versions) String() string {
	if v == nil {
		return ""
	}
	s := make([]string, len(*v))
	for i, x := range *v {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (v *Versions) Set(s string) error {
	*v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		x, err := weekly.ParseVersion(p)
		if err != nil {
			return err
		}
		*v = append(*v, x)
	}
	return nil
}

// List is a comma-separated list of names (a flag.Value).
type List []string

func (l *List) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set implements flag.Value.
func (l *List) Set(s string) error {
	*l = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// Publisher makes a judgement visible outside the process (an UpgradeReadiness object).
type Publisher interface {
	Publish(ctx context.Context, r *Result) error
}

// Gate judges clusters and targets: on request (Evaluate, the HTTP API) and every Interval
// for the metrics and the Publisher.
type Gate struct {
	cfg      Config
	db       *sql.DB
	targets  []weekly.Version
	acceptor func(cluster string) weekly.Acceptor
	pub      Publisher
	log      *slog.Logger
	now      func() time.Time
	met      *metrics
	// known are the clusters of the last RunOnce that could list them.
	known []string
	// busy bounds the judgements requested through the API at once.
	busy chan struct{}
}

// maxRequests is how many judgements the API runs at once; more get 503.
const maxRequests = 2

// NewGate returns the gate over db; target is judged when cfg names no target, and when
// neither does, each cluster's own default (weekly.TargetFor: the release after its own).
// acceptor
// returns the acknowledged risks of a cluster in force (nil: none); pub may be nil; reg may
// be nil.
func NewGate(cfg Config, db *sql.DB, target weekly.Version, acceptor func(cluster string) weekly.Acceptor, pub Publisher, log *slog.Logger, reg prometheus.Registerer) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ts := cfg.Targets
	if len(ts) == 0 && !target.IsZero() {
		ts = Versions{target}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gate{cfg: cfg, db: db, targets: ts, acceptor: acceptor, pub: pub, log: log.With("stage", "readiness"),
		now: time.Now, met: newMetrics(reg), busy: make(chan struct{}, maxRequests)}, nil
}

// Targets are the versions the gate judges every Interval; none: each cluster's own default.
func (g *Gate) Targets() []weekly.Version { return g.targets }

// targetsOf are the targets cluster is judged against: the gate's, else the cluster's own
// default (none while its release is unknown).
func (g *Gate) targetsOf(ctx context.Context, cluster string) ([]weekly.Version, error) {
	if len(g.targets) > 0 {
		return g.targets, nil
	}
	t, _, err := weekly.TargetFor(ctx, g.db, "", cluster, g.now())
	if err != nil || t.IsZero() {
		return nil, err
	}
	return []weekly.Version{t}, nil
}

// Evaluate judges cluster against target now.
func (g *Gate) Evaluate(ctx context.Context, cluster string, target weekly.Version) (*Result, error) {
	var acc weekly.Acceptor
	if g.acceptor != nil {
		acc = g.acceptor(cluster)
	}
	return Evaluate(ctx, g.db, Options{Cluster: cluster, Target: target, Window: g.cfg.Window, MaxSilence: g.cfg.MaxSilence,
		Acceptor: acc, Now: g.now})
}

// Clusters are the clusters judged every Interval: the configured ones and those with
// events or findings in the last 30 days (or the window, when longer).
func (g *Gate) Clusters(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, c := range g.cfg.Clusters {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	known, err := KnownClusters(ctx, g.db, g.now().Add(-max(g.cfg.Window, 30*24*time.Hour)))
	if err != nil {
		return nil, err
	}
	for _, c := range known {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// RunOnce judges every cluster and target, updates the metrics and publishes each result.
// It goes on after an error and returns the first.
func (g *Gate) RunOnce(ctx context.Context) ([]*Result, error) {
	var first error
	clusters, err := g.Clusters(ctx)
	if err != nil {
		g.met.errors.Inc()
		first = err
		// The store fails: every cluster judged before is not judged now (below), so that no
		// published verdict outlives the store's failure.
		clusters = g.known
	} else {
		g.known = clusters
	}
	var out []*Result
	for _, c := range clusters {
		ts, err := g.targetsOf(ctx, c)
		if err != nil {
			g.met.errors.Inc()
			first = cmp(first, fmt.Errorf("judge %s: its default target: %w", c, err))
			continue
		}
		for _, t := range ts {
			r, err := g.Evaluate(ctx, c, t)
			if err != nil {
				g.met.errors.Inc()
				first = cmp(first, fmt.Errorf("judge %s for %s: %w", c, t, err))
				if g.pub != nil && ctx.Err() == nil {
					// A verdict that cannot be renewed must not stay in force: Unknown, saying why.
					nj := &Result{Cluster: c, Target: t, State: Unknown, Reason: ReasonNotJudged,
						Message: fmt.Sprintf("%s: not judged for %s: %v", c, t, err)}
					if err := g.pub.Publish(ctx, nj); err != nil {
						first = cmp(first, fmt.Errorf("publish %s for %s: %w", c, t, err))
					}
				}
				continue
			}
			g.met.set(r)
			out = append(out, r)
			if g.pub != nil {
				if err := g.pub.Publish(ctx, r); err != nil {
					g.met.errors.Inc()
					first = cmp(first, fmt.Errorf("publish %s for %s: %w", c, t, err))
				}
			}
		}
	}
	return out, first
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Run judges every Interval until ctx is done.
func (g *Gate) Run(ctx context.Context) error {
	if g.cfg.Interval == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := g.RunOnce(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("upgrade readiness not judged", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Ready implements daemon.Component: the gate is always ready (a failed judgement is
// counted and logged, and the last one stays published).
func (g *Gate) Ready() error { return nil }

type metrics struct {
	blockers, accepted, state *prometheus.GaugeVec
	errors                    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		blockers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "auditlens_upgrade_blockers",
			Help: "Blockers of the upgrade of a cluster to a target version used in the readiness window and not accepted."},
			[]string{"cluster", "target_version"}),
		accepted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "auditlens_upgrade_accepted_blockers",
			Help: "Blockers of the upgrade used in the readiness window that an unexpired acknowledgement accepts."},
			[]string{"cluster", "target_version"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "auditlens_upgrade_readiness",
			Help: "The upgrade readiness gate: 1 for the current state (ready, blocked, unknown) of a cluster and target version, 0 for the others."},
			[]string{"cluster", "target_version", "state"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "auditlens_upgrade_readiness_errors_total",
			Help: "Judgements of the upgrade readiness gate that failed (database) or could not be published."}),
	}
	if reg != nil {
		reg.MustRegister(m.blockers, m.accepted, m.state, m.errors)
	}
	return m
}

func (m *metrics) set(r *Result) {
	t := r.Target.String()
	m.blockers.WithLabelValues(r.Cluster, t).Set(float64(len(r.Blockers)))
	m.accepted.WithLabelValues(r.Cluster, t).Set(float64(len(r.Accepted)))
	for _, s := range []string{Ready, Blocked, Unknown} {
		v := 0.0
		if s == r.State {
			v = 1
		}
		m.state.WithLabelValues(r.Cluster, t, s).Set(v)
	}
}
