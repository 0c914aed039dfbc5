package report

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/kubeclient"
	"github.com/auditlens/auditlens/services/report/owners"
	"github.com/auditlens/auditlens/services/report/page"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
	"github.com/auditlens/auditlens/services/report/yamlfile"
)

// FilesConfig names the YAML files kept in git that the report reads: accepted risks and
// owners.
type FilesConfig struct {
	Acks   acks.Config
	Owners owners.Config
	// Reload is how often the files are checked for changes.
	Reload time.Duration
}

// DefaultFilesConfig checks the files every 30 seconds.
func DefaultFilesConfig() FilesConfig { return FilesConfig{Reload: 30 * time.Second} }

// RegisterFlags registers --acknowledgements-file, --owners-file and --report-files-reload.
func (c *FilesConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Acks.RegisterFlags(fs)
	c.Owners.RegisterFlags(fs)
	fs.DurationVar(&c.Reload, "report-files-reload", c.Reload, "how often --acknowledgements-file and --owners-file are checked for changes")
}

// Validate checks c and never changes it.
func (c FilesConfig) Validate() error {
	if c.Reload < time.Second {
		return fmt.Errorf("--report-files-reload %s: want at least 1s", c.Reload)
	}
	return nil
}

// Files are the loaded files (each nil when not configured).
type Files struct {
	Acks   *yamlfile.File[*acks.Set]
	Owners *yamlfile.File[*owners.Owners]
	// Namespaces are the cluster's namespace labels, for the owners' namespace_labels
	// (nil: not read).
	Namespaces *owners.Namespaces
	log        *slog.Logger
	// Now is the clock of acceptances (tests); nil: time.Now.
	Now func() time.Time
}

// OpenFiles loads the files c names; a file that does not load is an error (the service
// does not start with a broken file; later versions that do not load are refused and
// counted in auditlens_report_file_refused_total{file}).
func OpenFiles(c FilesConfig, kube kubeclient.Config, log *slog.Logger, reg prometheus.Registerer) (*Files, error) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "auditlens_report_file_refused_total",
		Help: "Versions of --acknowledgements-file or --owners-file refused (the last good version stays in force)."}, []string{"file"})
	if reg != nil {
		if err := reg.Register(refused); err != nil {
			return nil, err
		}
	}
	count := func(name string) func(error) { return func(error) { refused.WithLabelValues(name).Inc() } }
	a, err := c.Acks.Open(log, count("acknowledgements"))
	if err != nil {
		return nil, err
	}
	o, err := c.Owners.Open(log, count("owners"))
	if err != nil {
		return nil, err
	}
	f := &Files{Acks: a, Owners: o, log: log}
	if c.Owners.NamespaceLabels {
		rc, err := kube.REST()
		if err != nil {
			return nil, fmt.Errorf("--owners-namespace-labels: %w", err)
		}
		if f.Namespaces, err = owners.NewNamespaces(rc); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Watcher reloads the files every interval; nil when there is none.
func (f *Files) Watcher(interval time.Duration) daemon.Component {
	if f.Acks == nil && f.Owners == nil && f.Namespaces == nil {
		return nil
	}
	return daemon.ComponentFuncs{RunFunc: func(ctx context.Context) error {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if f.Namespaces != nil {
				if err := f.Namespaces.Refresh(ctx); err != nil && ctx.Err() == nil && f.log != nil {
					f.log.Warn("namespace labels not read; the last ones stay", "err", err)
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			// A refused version is logged and counted by the file itself.
			if f.Acks != nil {
				_, _ = f.Acks.Reload()
			}
			if f.Owners != nil {
				_, _ = f.Owners.Reload()
			}
		}
	}, ReadyFunc: func() error { return nil }}
}

func (f *Files) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Acceptor is the acceptor of a cluster's blockers in force (nil: none).
func (f *Files) Acceptor(cluster string) weekly.Acceptor { return acks.Acceptor(f.Acks)(cluster) }

// CurrentOwners is the owners file in force (nil: none), with the namespace labels.
func (f *Files) CurrentOwners() *owners.Owners {
	if f.Owners == nil {
		return nil
	}
	if f.Namespaces != nil {
		return f.Owners.Current().WithLabels(f.Namespaces.Labels)
	}
	return f.Owners.Current()
}

// callersForTeams is how many callers a blocker lists in a report split by team: all of
// them, so each team's cut is exact, up to this bound.
const callersForTeams = 10000

// Weekly sets d up for the files: accepted risks taken off the blockers and the
// acknowledgements to review listed (Amend); with owners, one mail per team with its own
// callers and the whole report to d.Recipients (Split).
func (f *Files) Weekly(d *schedule.Delivery) {
	if f.Acks != nil {
		d.Amend = func(ctx context.Context, r *weekly.Report) error {
			set := f.Acks.Current()
			r.Accept(set.For(r.Cluster), f.now())
			ns, err := set.Review(ctx, d.DB, r.Cluster, f.now())
			if err != nil {
				return err
			}
			r.Notices = ns
			return nil
		}
	}
	if f.Owners != nil {
		per := d.Options.CallersPerBlocker
		if per == 0 {
			per = 25
		}
		d.Options.CallersPerBlocker = callersForTeams
		platform := d.Recipients
		d.Split = func(r *weekly.Report) []schedule.Addressed {
			return f.CurrentOwners().Split(r, platform, per)
		}
	}
}

// teamFilter is the console's view of the owners in force (nil without an owners file).
func (f *Files) teamFilter() func() page.TeamFilter {
	if f.Owners == nil {
		return nil
	}
	return func() page.TeamFilter { return f.CurrentOwners() }
}
