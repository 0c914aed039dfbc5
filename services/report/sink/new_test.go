package sink

import (
	"context"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// TestNewEmbeddedService wires the service as the report binary does, with no
// --clickhouse-dsn (embedded chDB), runs its stages and stops them upstream first.
func TestNewEmbeddedService(t *testing.T) {
	dir := chtest.EmbeddedDir(t)
	var c Config
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	c.RegisterFlags(fs, t.TempDir())
	if err := fs.Parse([]string{"--data-dir", dir, "--batch-max-wait", "50ms"}); err != nil {
		t.Fatal(err)
	}
	b := openBus(t)
	comps, err := New(c, daemon.Deps{Bus: b, Cluster: "prod", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 2 {
		t.Fatalf("%d components, want the writer and the store closer (no weekly schedule without --mail-to)", len(comps))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.RunStages(ctx, comps, slog.New(slog.DiscardHandler)) }()
	if err := b.Publish(ctx, messages("svc", 50)...); err != nil {
		t.Fatal(err)
	}
	st, err := chdb.Open(ctx, dir, store.DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitFor(t, "50 findings in embedded ClickHouse", func() bool { return distinct(t, st) == 50 })
	waitFor(t, "ready", func() bool { return comps[0].Ready() == nil })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stages did not stop")
	}
}
