package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// readinessMain runs `report readiness ...` on the engine the service's own flags choose,
// with the service's --acknowledgements-file.
func readinessMain(args []string, stdout, stderr io.Writer) int {
	ec := engine.DefaultConfig(daemon.DataRoot())
	var ac acks.Config
	return readiness.Main(args, stdout, stderr, readiness.Engine{
		RegisterFlags: ec.RegisterFlags,
		Validate:      func() error { return ec.Validate() },
		Embedded:      ec.Embedded,
		Open: func(ctx context.Context) (readiness.Store, error) {
			st, err := ec.Open(ctx)
			if err != nil {
				return nil, err
			}
			if err := schemaCurrent(ctx, st, ec.Describe()); err != nil {
				_ = st.Close()
				return nil, err
			}
			return st, nil
		},
		Now: now,
	}, func(fs *flag.FlagSet) {
		ac.RegisterFlags(fs)
	}, func(cl string) (weekly.Acceptor, error) {
		f, err := ac.Open(nil, nil)
		if err != nil || f == nil {
			return nil, err
		}
		return f.Current().For(cl), nil
	})
}

// schemaCurrent fails, saying what to run, when the store lacks a migration this report reads
// (a store written by an older report): the command only reads, it never migrates.
func schemaCurrent(ctx context.Context, st *store.Store, where string) error {
	applied, err := st.AppliedMigrations(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w: is this auditlens's database? `report migrate` with the same flags creates it", where, err)
	}
	var missing []string
	for _, m := range store.Migrations {
		if !applied[m.Version] {
			missing = append(missing, fmt.Sprintf("%d (%s)", m.Version, m.Name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks schema migration %s: run `report migrate` with the same flags, or start the report service, which migrates at start",
			where, strings.Join(missing, ", "))
	}
	return nil
}
