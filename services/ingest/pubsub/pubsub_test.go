package pubsub_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/goleak"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/pubsub"
)

const (
	project = "p"
	topic   = "projects/p/topics/k8s-audit"
	subName = "projects/p/subscriptions/auditlens"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		// The Pub/Sub library's own: opencensus's global worker (started by init), and the
		// stream keep-alive, which notices the end of Receive only at its next ping tick.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"))
}

// entries are n GKE LogEntries, each a genuine sample with a unique operation id (and so
// auditID), as a Cloud Logging sink publishes them.
func entries(t *testing.T, n int) (data [][]byte, want []string) {
	b, err := os.ReadFile("../../../lib/envelope/testdata/managed/gke-logentry-khi.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var samples [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		samples = append(samples, bytes.Clone(sc.Bytes()))
	}
	for i := range n {
		s := samples[i%len(samples)]
		id := fmt.Sprintf("op-%d", i)
		e := bytes.Replace(s, []byte(`"operation":{`), []byte(`"operation":{"id":"`+id+`",`), 1)
		if bytes.Equal(e, s) {
			t.Fatalf("sample without operation: %.100s", s)
		}
		data = append(data, e)
		want = append(want, "auditlens.events.sample-cluster sample-cluster/"+id+"/ResponseComplete")
	}
	return data, want
}

// fakePubSub is the library's in-process server with the topic and subscription a sink
// and an operator would create.
func fakePubSub(t *testing.T) (*pstest.Server, []option.ClientOption) {
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	opts := []option.ClientOption{option.WithGRPCConn(conn)}
	c, err := gpubsub.NewClient(context.Background(), project, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: subName, Topic: topic, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	return srv, opts
}

// TestSource: GKE entries published to the topic land on the bus as audit events, under
// the cluster their entry names, each acknowledged; a message that is no audit log entry is
// dead-lettered and acknowledged too.
func TestSource(t *testing.T) {
	n := testnats.Start(t)
	srv, opts := fakePubSub(t)
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	data, want := entries(t, 60)
	for _, d := range data {
		srv.Publish(topic, d, nil)
	}
	srv.Publish(topic, []byte("not a log entry"), nil)
	cfg := pubsub.DefaultConfig()
	cfg.Subscription, cfg.ClientOptions = subName, opts
	s, err := pubsub.New(context.Background(), cfg, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testkit.Eventually(t, 2*time.Minute, "every message acknowledged", func() bool {
		for _, m := range srv.Messages() {
			if m.Acks == 0 {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, total := n.IDs(t, bus.Events)
	if total != len(want) {
		t.Fatalf("%d events on the bus, want %d", total, len(want))
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Fatalf("%s stored %d times (have %v)", id, got[id], keys(got, 3))
		}
	}
}

func keys(m map[string]int, n int) []string {
	var out []string
	for k := range m {
		if len(out) == n {
			break
		}
		out = append(out, k)
	}
	return out
}

// TestKill9 kills the ingest process -9 while it reads the subscription (messages being
// stored are then neither acknowledged nor lost: Pub/Sub redelivers them after the ack
// deadline) and restarts it: every event is stored exactly once.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the ingest binary")
	}
	bin := filepath.Join(t.TempDir(), "ingest")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ingest").CombinedOutput(); err != nil {
		t.Fatalf("build ingest: %v\n%s", err, out)
	}
	n := testnats.Start(t)
	srv, _ := fakePubSub(t)
	data, want := entries(t, 3000)
	for _, d := range data {
		srv.Publish(topic, d, nil)
	}
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "--pubsub-subscription", subName, "--nats-url", n.URL(),
			"--cluster", "fallback", "--metrics-addr", "", "--log-format", "json", "--pubsub-max-outstanding", "100")
		cmd.Env = append(os.Environ(), "PUBSUB_EMULATOR_HOST="+srv.Addr)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	cmd := run()
	testkit.Eventually(t, 2*time.Minute, "part of the subscription stored", func() bool { _, total := n.IDs(t, bus.Events); return total >= len(want)/10 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	_, at := n.IDs(t, bus.Events)
	t.Logf("killed after %d of %d events", at, len(want))
	if at >= len(want) {
		t.Fatal("everything was stored before the kill; publish more")
	}
	cmd = run()
	testkit.Eventually(t, 2*time.Minute, "every event after the restart", func() bool { _, total := n.IDs(t, bus.Events); return total >= len(want) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ingest after SIGTERM: %v", err)
	}
	got, total := n.IDs(t, bus.Events)
	if total != len(want) {
		t.Errorf("%d events, want %d", total, len(want))
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Fatalf("%s stored %d times", id, got[id])
		}
	}
}
