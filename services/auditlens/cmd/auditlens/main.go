// Command auditlens runs the whole pipeline (ingest, classify, report) in one process, for one
// machine: by default on an embedded NATS JetStream server and embedded ClickHouse, both keeping
// their data under --data-root, so nothing else needs to be installed or started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/classify"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/report"
)

const synopsis = `auditlens [flags]

Runs ingest, classify and report in one process. Audit events come from --audit-log (a file
the apiserver writes, followed across rotations) and/or --webhook-addr (the audit webhook);
findings go to embedded ClickHouse in --data-root (or --clickhouse-dsn). The services talk over
an embedded NATS JetStream server (or --nats-url / --kafka-brokers). The web console (clusters,
the weekly report, callers and requests) is at / on --report-console-addr (loopback only, as
kubectl port-forward reaches it); --report-console-auth-addr serves it to Kubernetes bearer
tokens. Once every stage is ready, the log says the URL to open.

Every flag of the ingest, classify and report binaries is accepted, under the same name.
--data-root (AUDITLENS_DATA_ROOT) sets the default of every data location: nats/,
checkpoints/, chdb/.`

// classifyReportMemory is the soft memory limit's share of classify and report: their
// processes peak at 37-48 and 55-74 MB resident over 50-800 MB of audit log, binary and
// runtime included, which the all-in-one holds once.
const classifyReportMemory = 64 << 20

// maxBacklog is the all-in-one's --bus-max-backlog: ingest reads the audit log about 4 times
// as fast as classify classifies it, and every message the embedded NATS server stores ahead
// of classify is memory (its file-store blocks stay cached 10 s after their last use, the
// client buffers what it pulled), so ingest waits while classify has this many messages of
// events (EventBatches of up to 1024 events, ~200 of the sample's events) or more not yet
// acknowledged: about a second of classify's work. Measured in BenchmarkMemory (README:
// all-in-one peak memory).
const maxBacklog = 256

// consoleAddr is the all-in-one's --report-console-addr: loopback, beside --metrics-addr's
// 127.0.0.1:9100.
const consoleAddr = "127.0.0.1:9101"

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	// The data root is the default of every data location, so it must be known before the
	// flags (whose defaults derive from it) are registered.
	root, tempNote := writableDataRoot(dataRootArg(args, os.LookupEnv))
	c := configs{
		root:     root,
		ingest:   ingest.DefaultConfig(root),
		classify: classify.DefaultConfig(),
		report:   report.DefaultConfig(root),
	}
	c.ingest.Backlog.Max = maxBacklog
	c.report.Console.Addr = consoleAddr
	return daemon.Main(daemon.Spec{
		Name:               "auditlens",
		Synopsis:           synopsis,
		DefaultMetricsAddr: "127.0.0.1:9100",
		DataRoot:           root,
		// The Go heap's share only: embedded ClickHouse allocates outside it (see README).
		MemoryLimit: func() int64 {
			if n := c.ingest.MemoryLimit(); n > 0 {
				return n + classifyReportMemory
			}
			return 0 // an input whose memory is not measured: no default limit
		},
		Flags:    c.registerFlags,
		Validate: c.validate,
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			if tempNote != "" {
				d.Logger.Warn(tempNote, "data_root", c.root)
			} else {
				d.Logger.Info("data root", "data_root", c.root)
			}
			// Upstream first, so a shutdown drains ingest, then classify, then report.
			// Ingest waits for this classify's group, whatever --bus-backlog-group says.
			c.ingest.Backlog.Group = c.classify.Group
			in, err := ingest.New(c.ingest, d)
			if err != nil {
				return nil, fmt.Errorf("ingest: %w", err)
			}
			cl, err := classify.New(c.classify, d)
			if err != nil {
				return nil, fmt.Errorf("classify: %w", err)
			}
			if c.report.Releases, err = c.classify.Releases(); err != nil {
				return nil, fmt.Errorf("classify: %w", err)
			}
			out, err := report.New(c.report, d)
			if err != nil {
				return nil, fmt.Errorf("report: %w", err)
			}
			comps := append(append(in, cl...), out...)
			if c.report.Page {
				comps = append(comps, announce(consoleURL(c.report.Console.Addr), comps, d.Bus, d.Logger))
			}
			return comps, nil
		},
	}, args, os.Stderr)
}

// configs are the three services' configurations, filled by one flag set.
type configs struct {
	root     string
	ingest   ingest.Config
	classify classify.Config
	report   report.Config
}

// registerFlags registers --data-root and every service's flags on fs. The services' flag
// names are distinct (a name two of them defined would panic here, and TestFlags says which).
func (c *configs) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.root, "data-root", c.root, "root `directory` of every default data location: nats/, checkpoints/, chdb/")
	// Before report's flags: report's own deprecated --data-dir (its ClickHouse directory)
	// must not take the name, which here always meant the data root.
	flagenv.Deprecated(fs, "data-dir", "data-root")
	c.ingest.RegisterFlags(fs)
	c.classify.RegisterFlags(fs)
	c.report.RegisterFlags(fs)
}

// validate checks the parsed flags.
func (c *configs) validate() error {
	for _, err := range []error{c.ingest.Validate(), c.classify.Validate(), c.report.Validate()} {
		if err != nil {
			return err
		}
	}
	return nil
}

// writableDataRoot returns root when this process can write there (creating it if needed),
// else a new temporary directory and a sentence saying so for the log: in a container whose
// volume the user cannot write, the pipeline still runs, and says its data will not last.
func writableDataRoot(root string) (string, string) {
	if err := os.MkdirAll(root, 0o700); err == nil {
		if f, err := os.CreateTemp(root, ".writable-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return root, ""
		}
	}
	tmp, err := os.MkdirTemp("", "auditlens-data-")
	if err != nil {
		return root, "" // the stages fail on the data root with their own message
	}
	return tmp, fmt.Sprintf("data root %s is not writable: using a temporary directory, lost when the process or container stops (mount a writable volume there, or give --data-root)", root)
}

// dataRootArg finds the data root before the flags are parsed: --data-root (or its deprecated
// name --data-dir) on the command line, either form; else $AUDITLENS_DATA_ROOT, else the
// deprecated $AUDITLENS_DATA_DIR; else daemon.DataRoot's default.
func dataRootArg(args []string, lookup func(string) (string, bool)) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "data-root" && name != "data-dir") {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	for _, env := range []string{daemon.DataRootEnv, flagenv.EnvName("data-dir")} {
		if v, ok := lookup(env); ok && v != "" {
			return v
		}
	}
	return daemon.DataRoot()
}
