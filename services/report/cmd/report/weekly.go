package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/kubeclient"
	"github.com/auditlens/auditlens/services/report/weekly/command"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
)

// weeklyMain runs `report weekly ...` (see package weekly/command) on the engine the
// service's own flags choose (--clickhouse-dsn, or embedded ClickHouse in --clickhouse-data-dir),
// with the service's --acknowledgements-file and --owners-file.
func weeklyMain(args []string, stdout, stderr io.Writer) int {
	ec := engine.DefaultConfig(daemon.DataRoot())
	fc := report.DefaultFilesConfig()
	var kc kubeclient.Config
	return command.Main(args, stdout, stderr, command.Engine{
		RegisterFlags: func(fs *flag.FlagSet) {
			ec.RegisterFlags(fs)
			fc.Acks.RegisterFlags(fs)
			fc.Owners.RegisterFlags(fs)
			kc.RegisterFlags(fs)
		},
		Validate: func() error {
			if err := kc.Validate(); err != nil {
				return err
			}
			return ec.Validate()
		},
		Open: func(ctx context.Context) (command.Store, error) { return ec.Open(ctx) },
		Now:  now,
		Prepare: func(ctx context.Context, d *schedule.Delivery) error {
			files, err := report.OpenFiles(fc, kc, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				return err
			}
			if files.Namespaces != nil {
				if err := files.Namespaces.Refresh(ctx); err != nil {
					return err
				}
			}
			files.Weekly(d)
			return nil
		},
	})
}
