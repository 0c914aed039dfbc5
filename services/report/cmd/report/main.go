// Command report consumes findings into ClickHouse (`report`), applies the schema
// (`report migrate`) and builds or mails the weekly report (`report weekly`).
package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report"
	"github.com/auditlens/auditlens/services/report/migrate"
)

const synopsis = `report [flags]
report migrate [flags]
report weekly [flags]     (see report weekly --help)
report readiness [flags]  (see report readiness --help)

report consumes findings (stream AUDIT_FINDINGS, consumer group --report-consumer-group) and
writes them to ClickHouse in batches, acknowledging each finding once its batch is committed;
with no --clickhouse-dsn it keeps them in embedded ClickHouse in --clickhouse-data-dir. With
--weekly-schedule and --mail-to it also mails the weekly report. The schema is migrated at
start; report migrate only migrates.`

// now is the clock of the one-shot commands (report readiness, report weekly); tests set it
// to testkit.Now so that their outcome does not depend on the day they run.
var now = time.Now

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "migrate":
			return migrate.Main(args[1:], stderr)
		case "weekly":
			return weeklyMain(args[1:], stdout, stderr)
		case "readiness":
			return readinessMain(args[1:], stdout, stderr)
		}
	}
	cfg := report.DefaultConfig(daemon.DataRoot())
	return daemon.Main(daemon.Spec{
		Name:               "report",
		Synopsis:           synopsis,
		DefaultMetricsAddr: ":9103",
		Flags:              cfg.RegisterFlags,
		// A closure, not the method value cfg.Validate: that would copy cfg before the flags
		// are parsed into it.
		Validate: func() error { return cfg.Validate() },
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			return report.New(cfg, d)
		},
	}, args, stderr)
}
