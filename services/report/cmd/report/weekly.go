package main

import (
	"context"
	"flag"
	"io"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/weekly/command"
)

// weeklyMain runs `report weekly ...` (see package weekly/command) on the engine the
// service's own flags choose (--clickhouse-dsn, or embedded ClickHouse in --data-dir).
func weeklyMain(args []string, stdout, stderr io.Writer) int {
	var ec engine.Config
	return command.Main(args, stdout, stderr, command.Engine{
		RegisterFlags: func(fs *flag.FlagSet) { ec.RegisterFlags(fs, daemon.DefaultDataDir()) },
		Validate:      ec.Validate,
		Open:          func(ctx context.Context) (command.Store, error) { return ec.Open(ctx) },
	})
}
