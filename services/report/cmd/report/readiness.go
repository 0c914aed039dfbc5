package main

import (
	"context"
	"flag"
	"io"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/readiness"
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
		Open:          func(ctx context.Context) (readiness.Store, error) { return ec.Open(ctx) },
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
