package natscluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(natscluster.Exit))
}

// The harness's own promises: an R3 stream has a leader among the servers; SIGKILL of that
// leader makes another one lead; the killed server, started again on its store, becomes
// healthy (caught up) and hosts the stream again; a client is found on the server it uses.
func TestKillAndRestartTheLeader(t *testing.T) {
	c := natscluster.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(c.Servers[1].URL(), nats.Name("harness-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if s, err := c.ServerOf("harness-test"); err != nil || s != c.Servers[1] {
		t.Fatalf("client found on %v (%v), want %s", s, err, c.Servers[1].Name)
	}
	leader, err := c.StreamLeader(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	leader.Kill()
	if leader.Running() {
		t.Fatal("killed server still running")
	}
	next, err := c.StreamLeader(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("%s still leads after being killed", leader.Name)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitHealthy(time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s killed, %s took over, %s back", leader.Name, next.Name, leader.Name)
}
