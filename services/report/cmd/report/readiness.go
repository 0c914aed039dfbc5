package main

import (
	"context"
	"io"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/engine"
	"github.com/auditlens/auditlens/services/report/readiness"
)

// readinessMain runs `report readiness ...` on the engine the service's own flags choose.
func readinessMain(args []string, stdout, stderr io.Writer) int {
	ec := engine.DefaultConfig(daemon.DataRoot())
	return readiness.Main(args, stdout, stderr, readiness.Engine{
		RegisterFlags: ec.RegisterFlags,
		Validate:      func() error { return ec.Validate() },
		Open:          func(ctx context.Context) (readiness.Store, error) { return ec.Open(ctx) },
	}, nil, nil)
}
