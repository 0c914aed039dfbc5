// Command ingest follows kube-apiserver audit log files and serves the audit webhook,
// publishing every audit event to the bus.
package main

import (
	"context"
	"os"
	"runtime/debug"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/ingest"
)

const synopsis = `ingest: follow kube-apiserver audit logs and the audit webhook into the auditlens bus.

Usage:
  ingest --audit-log /var/log/kubernetes/audit/audit.log --checkpoint-dir /var/lib/auditlens [--start-at beginning|end]
  ingest --webhook-addr :8443 --webhook-tls-cert tls.crt --webhook-tls-key tls.key --webhook-token-file token`

func main() {
	cfg := ingest.DefaultConfig(daemon.DataRoot())
	os.Exit(daemon.Main(daemon.Spec{
		Name:               "ingest",
		Synopsis:           synopsis,
		DefaultMetricsAddr: ":9101",
		GCPercent:          ingest.GCPercent,
		MemoryLimit:        cfg.MemoryLimit,
		Flags:              cfg.RegisterFlags,
		Validate:           func() error { return cfg.Validate() }, // after the flags are parsed
		Build: func(_ context.Context, d daemon.Deps) ([]daemon.Component, error) {
			if !cfg.File.On() && os.Getenv("GOGC") == "" {
				// GCPercent buys the file input speed; the webhook alone holds request bodies,
				// whose memory Go's default target keeps closer to what is live.
				debug.SetGCPercent(100)
			}
			return ingest.New(cfg, d)
		},
	}, os.Args[1:], os.Stderr))
}
