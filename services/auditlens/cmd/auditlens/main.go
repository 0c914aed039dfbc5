// Command auditlens runs the whole pipeline (ingest, classify, report) in one process, for one
// machine: by default on an embedded NATS JetStream server and embedded ClickHouse, both keeping
// their data under --data-dir, so nothing else needs to be installed or started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/auditlens/page"
	"github.com/auditlens/auditlens/services/classify"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/report"
)

const synopsis = `auditlens [flags]

Runs ingest, classify and report in one process. Audit events come from --audit-log (a file
the apiserver writes, followed across rotations) and/or --webhook-addr (the audit webhook);
findings go to embedded ClickHouse in --data-dir (or --clickhouse-dsn). The services talk over
an embedded NATS JetStream server (or --nats-url / --kafka-brokers).

Every flag of the ingest, classify and report binaries is accepted; a flag two services both
define is prefixed with the service name here (e.g. --ingest-batch-size, --report-batch-size).
--data-dir sets the default of every data location (NATS store, checkpoints, ClickHouse).`

// classifyReportMemory is the soft memory limit's share of classify and report: their
// processes peak at 37-48 and 55-74 MB resident over 50-800 MB of audit log, binary and
// runtime included, which the all-in-one holds once.
const classifyReportMemory = 64 << 20

func main() {
	args := os.Args[1:]
	// --data-dir is the root of every default data location; it must be known before the
	// flags are registered, since their defaults derive from it.
	if dir := dataDirArg(args); dir != "" {
		_ = os.Setenv(daemon.DataRootEnv, dir)
	}
	var (
		ic = ingest.DefaultConfig(daemon.DataRoot())
		cc = classify.DefaultConfig()
		rc = report.DefaultConfig(daemon.DataRoot())
	)
	os.Exit(daemon.Main(daemon.Spec{
		Name:               "auditlens",
		Synopsis:           synopsis,
		DefaultMetricsAddr: "127.0.0.1:9100",
		// The Go heap's share only: embedded ClickHouse allocates outside it (see README).
		MemoryLimit: func() int64 {
			if n := ic.MemoryLimit(); n > 0 {
				return n + classifyReportMemory
			}
			return 0 // an input whose memory is not measured: no default limit
		},
		Flags: func(fs *flag.FlagSet) {
			fs.String("data-dir", daemon.DefaultDataDir(), "root `directory` of every default data location: nats/, checkpoints/, chdb/")
			merge(fs, map[string]func(*flag.FlagSet){
				"ingest":   ic.RegisterFlags,
				"classify": cc.RegisterFlags,
				"report":   rc.RegisterFlags,
			}, []string{"ingest", "classify", "report"})
		},
		Validate: func() error {
			for _, v := range []func() error{ic.Validate, cc.Validate, rc.Validate} {
				if err := v(); err != nil {
					return err
				}
			}
			return nil
		},
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			in, err := ingest.New(ic, d)
			if err != nil {
				return nil, fmt.Errorf("ingest: %w", err)
			}
			cl, err := classify.New(cc, d)
			if err != nil {
				return nil, fmt.Errorf("classify: %w", err)
			}
			out, err := report.New(rc, d)
			if err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			// The weekly report as a page beside /metrics; on embedded ClickHouse this shares
			// the writer's session (chDB allows one per process).
			st, err := rc.Engine.Open(context.Background())
			if err != nil {
				return nil, fmt.Errorf("report page: %w", err)
			}
			d.HTTP.Handle("/report", &page.Handler{DB: st.DB(), Cluster: d.Cluster, DefaultTarget: rc.Weekly.Target, Log: d.Logger})
			// Upstream first, so a shutdown drains ingest, then classify, then report; the
			// page's store handle closes last.
			comps := append(append(in, cl...), out...)
			return append(comps, daemon.CloseAtStop(st)), nil
		},
	}, args, os.Stderr))
}

// merge registers each service's flags on fs. The services were written to run alone, so two
// of them may define the same flag name (--batch-size, --drain-timeout): such a flag is
// registered once per service as --<service>-<name>.
func merge(fs *flag.FlagSet, register map[string]func(*flag.FlagSet), order []string) {
	sets := map[string]*flag.FlagSet{}
	count := map[string]int{}
	for _, svc := range order {
		s := flag.NewFlagSet(svc, flag.ContinueOnError)
		register[svc](s)
		sets[svc] = s
		s.VisitAll(func(f *flag.Flag) { count[f.Name]++ })
	}
	for _, svc := range order {
		sets[svc].VisitAll(func(f *flag.Flag) {
			name := f.Name
			if count[name] > 1 {
				name = svc + "-" + name
			}
			if r, ok := renamed[name]; ok {
				name = r
			}
			if fs.Lookup(name) != nil {
				return // a common flag (the daemon's own) already registered
			}
			fs.Var(f.Value, name, f.Usage)
		})
	}
}

// renamed flags: here --data-dir is the root of all data, so the report's own --data-dir (the
// embedded ClickHouse directory) takes a more specific name.
var renamed = map[string]string{"data-dir": "clickhouse-data-dir"}

// dataDirArg finds --data-dir in args (either form, one or two dashes), else its env twin
// AUDITLENS_DATA_DIR, else "".
func dataDirArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "data-dir" {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return os.Getenv("AUDITLENS_DATA_DIR")
}
