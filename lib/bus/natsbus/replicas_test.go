package natsbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
	"github.com/auditlens/auditlens/lib/testkit"
)

// admin is a plain JetStream client on the cluster, for the tests' own looks at streams and
// consumers.
func admin(t testing.TB, c *natscluster.Cluster) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.Name("admin"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// peers returns the stream's configured replicas and how many of its peers other than the
// leader are current; consumer, when not empty, names one of the stream's consumers instead.
func peers(t *testing.T, js jetstream.JetStream, stream, consumer string) (configured, current int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound(5*time.Second))
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var ci *jetstream.ClusterInfo
	if consumer == "" {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		configured, ci = info.Config.Replicas, info.Cluster
	} else {
		cons, err := st.Consumer(ctx, consumer)
		if err != nil {
			t.Fatalf("consumer %s of %s: %v", consumer, stream, err)
		}
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		configured, ci = info.Config.Replicas, info.Cluster
	}
	if ci != nil {
		for _, p := range ci.Replicas {
			if p.Current {
				current++
			}
		}
	}
	return configured, current
}

// openOn opens a bus with replicas on the cluster c.
func openOn(t *testing.T, c *natscluster.Cluster, replicas int) (*natsbus.Bus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := natsbus.Open(ctx, natsbus.Config{URL: c.URLs(), Replicas: replicas, AckTimeout: 5 * time.Second})
	if err == nil {
		t.Cleanup(func() { _ = b.Close() })
	}
	return b, err
}

// createConsumer makes the bus create its durable consumer group on s, then stops consuming.
func createConsumer(t *testing.T, js jetstream.JetStream, b bus.Bus, s bus.Stream, group string) {
	t.Helper()
	c, err := b.Consumer(s, group, bus.ConsumerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, func(context.Context, *bus.Delivery) {}) }()
	testkit.Eventually(t, 30*time.Second, "consumer "+group, func() bool {
		_, err := js.Consumer(context.Background(), natsbus.StreamName(s), group)
		return err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// --nats-replicas is real on a cluster: the streams are created with it, an existing stream
// is scaled to it when it changes (up and down), the durable consumers follow their stream
// (one created before the change too), and a count the cluster cannot host is an error that
// names the flag.
func TestReplicasOnCluster(t *testing.T) {
	c := natscluster.Start(t, 3)
	js := admin(t, c)
	events := natsbus.StreamName(bus.Events)

	b1, err := openOn(t, c, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range bus.Streams {
		if r, cur := peers(t, js, natsbus.StreamName(s), ""); r != 1 || cur != 0 {
			t.Fatalf("%s with --nats-replicas 1: %d replicas, %d followers", natsbus.StreamName(s), r, cur)
		}
	}
	createConsumer(t, js, b1, bus.Events, "before")
	_ = b1.Close()

	b3, err := openOn(t, c, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range bus.Streams {
		name := natsbus.StreamName(s)
		testkit.Eventually(t, 30*time.Second, name+" at 3 replicas, 2 current followers", func() bool {
			r, cur := peers(t, js, name, "")
			return r == 3 && cur == 2
		})
	}
	createConsumer(t, js, b3, bus.Events, "after")
	for _, group := range []string{"before", "after"} {
		testkit.Eventually(t, 30*time.Second, "consumer "+group+" on 3 replicas", func() bool {
			_, cur := peers(t, js, events, group)
			return cur == 2
		})
	}
	_ = b3.Close()

	if _, err := openOn(t, c, 5); err == nil || !strings.Contains(err.Error(), "--nats-replicas 5") {
		t.Fatalf("5 replicas on 3 servers: %v, want an error naming --nats-replicas 5", err)
	} else {
		t.Logf("5 replicas on 3 servers: %v", err)
	}

	if _, err := openOn(t, c, 1); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, events+" back to 1 replica", func() bool {
		r, cur := peers(t, js, events, "")
		return r == 1 && cur == 0
	})
}

// A single NATS server (not clustered) cannot keep 3 replicas: Open says so, naming the flag.
func TestReplicasOnASingleServer(t *testing.T) {
	addr := freePort(t)
	srv, err := natsbus.StartServer(t.TempDir(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: "nats://" + addr, Replicas: 3})
	if err == nil {
		_ = b.Close()
		t.Fatal("3 replicas on a single server accepted")
	}
	if !strings.Contains(err.Error(), "--nats-replicas 3") {
		t.Fatalf("3 replicas on a single server: %v, want an error naming --nats-replicas 3", err)
	}
	t.Log(err)
}

func TestReplicasConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  natsbus.Config
		want string
	}{
		{natsbus.Config{URL: natsbus.Embedded, StoreDir: "d", Replicas: 3}, "--nats-replicas 3"},
		{natsbus.Config{URL: "nats://x:4222", Replicas: -1}, "--nats-replicas -1"},
		{natsbus.Config{URL: "nats://x:4222", Replicas: 6}, "--nats-replicas 6"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
	for _, r := range []int{0, 1, 3, 5} {
		cfg := natsbus.Config{URL: "nats://x:4222", Replicas: r}
		if err := cfg.Validate(); err != nil {
			t.Errorf("--nats-replicas %d: %v", r, err)
		}
	}
}
