package main

import (
	"context"
	"io"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/weekly/command"
)

// weeklyMain runs `report weekly ...` (see package weekly/command) on the engine the
// service's own flags choose (--clickhouse-dsn, or embedded ClickHouse in --clickhouse-data-dir).
func weeklyMain(args []string, stdout, stderr io.Writer) int {
	ec := engine.DefaultConfig(daemon.DataRoot())
	return command.Main(args, stdout, stderr, command.Engine{
		RegisterFlags: ec.RegisterFlags,
		Validate:      func() error { return ec.Validate() },
		Open:          func(ctx context.Context) (command.Store, error) { return ec.Open(ctx) },
	})
}
