package transport

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/kafkabus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
)

func TestOpenEmbeddedCountsPerStream(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := Config{Cluster: "c1", NATS: natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()}}
	b, err := Open(context.Background(), c, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	msgs := append(bustest.Messages(bus.Events, "e", 3, 1), bustest.Messages(bus.DeadLetter, "d", 2, 1)...)
	msgs = append(msgs, bustest.Messages(bus.Events, "e2", 1, 1)...)
	if err := b.Publish(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	want := `
		# HELP auditlens_bus_published_messages_total Messages acknowledged by the bus, per stream.
		# TYPE auditlens_bus_published_messages_total counter
		auditlens_bus_published_messages_total{stream="deadletter"} 2
		auditlens_bus_published_messages_total{stream="events"} 4
	`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "auditlens_bus_published_messages_total"); err != nil {
		t.Fatal(err)
	}
	// The instrumented bus still reports the backlog ingest holds publishing back with.
	br, ok := b.(bus.BacklogReader)
	if !ok {
		t.Fatalf("%T hides the bus's backlog", b)
	}
	if n, err := br.Backlog(context.Background(), bus.Events, "classify"); err != nil || n != 4 {
		t.Fatalf("backlog of events: %d, %v; want 4", n, err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Cluster: "a/b", NATS: natsbus.Config{URL: "embedded", StoreDir: "x"}}, "--cluster"},
		{Config{Cluster: "a", NATS: natsbus.Config{URL: ""}}, "--nats-url"},
		{Config{Cluster: "a", Kafka: kafkaCfg("nohost")}, "--kafka-brokers"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

func kafkaCfg(brokers ...string) (c kafkabus.Config) { c.Brokers = brokers; return c }

func TestOneAtATimeFlag(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs, t.TempDir())
	if err := fs.Parse([]string{"--nats-one-at-a-time"}); err != nil {
		t.Fatal(err)
	}
	if !c.NATS.OneAtATime {
		t.Fatal("--nats-one-at-a-time did not reach the NATS configuration")
	}
}

// A NATS password stays out of the errors of a bad or unreachable --nats-url, for every URL
// of the list.
func TestErrorsHidePasswords(t *testing.T) {
	bad := Config{Cluster: "a", NATS: natsbus.Config{URL: "alice:s3/cret@nats:4222"}}
	if err := bad.Validate(); err == nil || strings.Contains(err.Error(), "s3/cret") {
		t.Errorf("Validate: %v", err)
	}
	down := Config{Cluster: "a", NATS: natsbus.Config{URL: "nats://alice:s3cret@127.0.0.1:1,nats://bob:pa@ss@127.0.0.1:2"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := Open(ctx, down, nil, nil)
	if err == nil {
		_ = b.Close()
		t.Fatal("connected to nothing")
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "pa@ss") || !strings.Contains(msg, "127.0.0.1:2") {
		t.Errorf("Open: %v", err)
	}
}

// The embedded server keeps every message id of the de-duplication window in memory: its
// streams get the short window unless one is given (the all-in-one held an id per event of
// the last two minutes, hundreds of MB on a large log; see BenchmarkMemory in
// services/auditlens/cmd/auditlens).
func TestEmbeddedDedupWindow(t *testing.T) {
	for _, c := range []struct {
		flag time.Duration
		want time.Duration
	}{{0, EmbeddedDedupWindow}, {time.Minute, time.Minute}} {
		dir := t.TempDir()
		cfg := Config{Cluster: "c1", NATS: natsbus.Config{URL: natsbus.Embedded, StoreDir: dir, Duplicates: c.flag}}
		b, err := Open(context.Background(), cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Close()
		// The streams' configuration is stored: read it back through a listening server.
		srv, err := natsbus.StartServer(dir, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		st, err := js.Stream(context.Background(), natsbus.StreamName(bus.Events))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Duplicates; got != c.want {
			t.Errorf("--nats-dedup-window %v: the stream's window is %v, want %v", c.flag, got, c.want)
		}
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}
