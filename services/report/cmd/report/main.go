// Command report consumes findings into ClickHouse (`report`), applies the schema
// (`report migrate`) and builds or mails the weekly report (`report weekly`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/sink"
	"github.com/auditlens/auditlens/services/report/store"
)

const synopsis = `report [flags]
report migrate [flags]
report weekly [flags]     (see report weekly --help)

report consumes findings (stream AUDIT_FINDINGS, consumer group --consumer-group) and writes
them to ClickHouse in batches, acknowledging each finding once its batch is committed; with
no --clickhouse-dsn it keeps them in embedded ClickHouse in --data-dir. With --weekly-schedule
and --mail-to it also mails the weekly report. The schema is migrated at start; report migrate
only migrates.`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "migrate":
			return migrateMain(args[1:], stderr)
		case "weekly":
			return weeklyMain(args[1:], stdout, stderr)
		}
	}
	var cfg sink.Config
	return daemon.Main(daemon.Spec{
		Name:               "report",
		Synopsis:           synopsis,
		DefaultMetricsAddr: ":9103",
		Flags:              func(fs *flag.FlagSet) { cfg.RegisterFlags(fs, daemon.DefaultDataDir()) },
		Validate:           cfg.Validate,
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			return sink.New(cfg, d)
		},
	}, args, stderr)
}

const migrateSynopsis = `report migrate [flags]

Creates the database and applies the schema migrations not applied yet, then sets the
retention of raw findings (on servers with TTL). Running it again changes nothing.`

func migrateMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("report migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c engine.Config
	c.RegisterFlags(fs, daemon.DefaultDataDir())
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	flagenv.Usage(fs, migrateSynopsis)
	if err := flagenv.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "report migrate: %v\n", err)
		return daemon.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "report migrate: unexpected argument %q (see --help)\n", fs.Arg(0))
		return daemon.ExitUsage
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "report migrate: %v\n", err)
		return daemon.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := c.Open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "report migrate: %v\n", err)
		return 1
	}
	defer st.Close()
	did, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: c.RetentionDays})
	if err != nil {
		fmt.Fprintf(stderr, "report migrate: %s: %v\n", c.Describe(), err)
		return 1
	}
	ver, _ := st.Version(ctx)
	fmt.Fprintf(stderr, "report migrate: %s (ClickHouse %s): applied %v, schema at version %d\n",
		c.Describe(), ver, did, store.Migrations[len(store.Migrations)-1].Version)
	return 0
}
