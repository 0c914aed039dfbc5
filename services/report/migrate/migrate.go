// Package migrate is the `report migrate` command: it applies the schema migrations not
// applied yet to the store the engine flags choose, and the retention of raw findings.
package migrate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/store"
)

// Synopsis is the head of --help.
const Synopsis = `report migrate [flags]

Creates the database and applies the schema migrations not applied yet, then records the
retention (--retention-days, --counts-retention-days) and sets it as TTL on servers that have
TTL. Running it again changes nothing.`

// DefaultTimeout is how long migrate tries before it gives up.
const DefaultTimeout = 2 * time.Minute

// Main runs `report migrate` with args and returns the exit code: 0 done, 1 failed, 2 bad
// usage. What it did, or why it failed, goes to stderr.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("report migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := engine.DefaultConfig(daemon.DataRoot())
	c.RegisterFlags(fs)
	timeout := fs.Duration("timeout", DefaultTimeout, "give up after this long")
	flagenv.Usage(fs, Synopsis)
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
	if err := run(ctx, c, stderr); err != nil {
		fmt.Fprintf(stderr, "report migrate: %v\n", err)
		return 1
	}
	return 0
}

// run opens the store c chooses and migrates it.
func run(ctx context.Context, c engine.Config, stderr io.Writer) error {
	st, err := c.Open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	did, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: c.RetentionDays, CountsRetentionDays: c.CountsRetentionDays})
	if err != nil {
		return fmt.Errorf("%s: %w", c.Describe(), err)
	}
	ver, _ := st.Version(ctx)
	fmt.Fprintf(stderr, "report migrate: %s (ClickHouse %s): applied %v, schema at version %d\n",
		c.Describe(), ver, did, store.Migrations[len(store.Migrations)-1].Version)
	return nil
}
