package natsbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/bustest"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server keeps a few process-wide goroutines after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startRateLimitLogExpiration.func1"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// Deletes the nats-server binary the cluster tests built.
		goleak.Cleanup(natscluster.Exit),
	)
}

func openEmbedded(t *testing.T) bus.Bus {
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestConformance(t *testing.T) {
	bustest.Run(t, openEmbedded)
}

func freePort(t *testing.T) string { return enginetest.FreeAddr(t) }

// A nats-server restarted on the same file store mid-stream loses nothing: publishes during
// the outage fail (the caller retries the same ids), and the consumer resumes after it.
func TestServerRestartLosesNothing(t *testing.T) {
	ctx := context.Background()
	dir, addr := t.TempDir(), freePort(t)
	srv, err := natsbus.StartServer(dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	b, err := natsbus.Open(ctx, natsbus.Config{URL: "nats://" + addr, AckTimeout: 2 * time.Second, StallWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	const n = 3000
	msgs := bustest.Messages(bus.Events, "rs", n, 2)
	publish := func(from, to int) {
		for i := from; i < to; i += 100 {
			for attempt := 0; ; attempt++ {
				err := b.Publish(ctx, msgs[i:min(i+100, to)]...)
				if err == nil {
					break
				}
				if attempt > 200 {
					t.Fatalf("publish %d: %v", i, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	col := bustest.NewCollector()
	c, _ := b.Consumer(bus.Events, "restart", bus.ConsumerOptions{AckWait: 2 * time.Second})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(cctx, func(ctx context.Context, d *bus.Delivery) { col.Add(d.ID); _ = d.Ack(ctx) })
	}()
	publish(0, n/2)
	col.WaitDistinct(t, n/4, 30*time.Second)

	srv.Shutdown()
	srv.WaitForShutdown()
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		s, err := natsbus.StartServer(dir, addr)
		if err == nil {
			t.Cleanup(s.Shutdown)
		}
		restarted <- err
	}()
	publish(n/2, n) // retries through the outage
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	col.WaitDistinct(t, n, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Logf("consume ended with %v", err)
	}
	if d, _ := col.Counts(); d != n {
		t.Fatalf("distinct %d, want %d", d, n)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  natsbus.Config
		want string
	}{
		{natsbus.Config{}, "--nats-url is empty"},
		{natsbus.Config{URL: "embedded"}, "--nats-store-dir"},
		{natsbus.Config{URL: "localhost/4222"}, "not a NATS URL"},
		{natsbus.Config{URL: "nats://x:1", TLSCertFile: "c"}, "go together"},
	} {
		err := c.cfg.Validate()
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestUnreachableServerFailsClearly(t *testing.T) {
	_, err := natsbus.Open(context.Background(), natsbus.Config{URL: "nats://" + freePort(t)})
	if err == nil || !contains(err.Error(), "connect to nats") {
		t.Fatalf("got %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A server that requires credentials: the bus passes user/password and token options through,
// and a wrong secret fails at Open with an error that names the connection, not a hang.
func TestAuthentication(t *testing.T) {
	for _, c := range []struct {
		name   string
		server server.Options
		good   natsbus.Config
		bad    natsbus.Config
	}{
		{"user-password", server.Options{Username: "auditlens", Password: "s3cret"},
			natsbus.Config{User: "auditlens", Password: "s3cret"}, natsbus.Config{User: "auditlens", Password: "wrong"}},
		{"token", server.Options{Authorization: "t0ken"},
			natsbus.Config{Token: "t0ken"}, natsbus.Config{Token: "nope"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.server
			o.Host, o.Port, o.JetStream, o.StoreDir, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, t.TempDir(), true, true
			srv, err := server.NewServer(&o)
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			defer srv.Shutdown()
			if !srv.ReadyForConnections(testkit.Bound(10 * time.Second)) {
				t.Fatal("server not ready")
			}
			bad := c.bad
			bad.URL = srv.ClientURL()
			if b, err := natsbus.Open(context.Background(), bad); err == nil {
				b.Close()
				t.Fatal("wrong credentials accepted")
			} else if !strings.Contains(err.Error(), "connect to nats") || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("wrong credentials: %v", err)
			}
			good := c.good
			good.URL = srv.ClientURL()
			b, err := natsbus.Open(context.Background(), good)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Publish(context.Background(), bustest.Messages(bus.Events, "auth", 10, 1)...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A consumer that holds its deliveries and settles them in groups (as the report writer does
// with a ClickHouse batch) reaches MaxUnacked again and again; each time it settles, deliveries
// must resume at once, not after a pull request expires or the ack wait passes.
func TestHeldDeliveriesAtTheLimitResume(t *testing.T) {
	b := openEmbedded(t)
	const n, limit = 10 * 4096, 4096
	if err := b.Publish(context.Background(), bustest.Messages(bus.Findings, "held", n, 1)...); err != nil {
		t.Fatal(err)
	}
	c, _ := b.Consumer(bus.Findings, "held", bus.ConsumerOptions{MaxUnacked: limit, AckWait: time.Minute})
	held := make(chan *bus.Delivery, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Consume(ctx, func(_ context.Context, d *bus.Delivery) { held <- d }) }()
	var batch []*bus.Delivery
	got := 0
	deadline := time.After(40 * time.Second) // below the ack wait: a stall until redelivery fails
	for got < n {
		select {
		case d := <-held:
			got++
			if batch = append(batch, d); len(batch) == limit { // full: "write" it, then settle it
				for _, d := range batch {
					_ = d.Ack(ctx)
				}
				batch = batch[:0]
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("deliveries stalled at %d of %d with %d held", got, n, len(batch))
		case <-deadline:
			t.Fatalf("only %d of %d delivered", got, n)
		}
	}
}
