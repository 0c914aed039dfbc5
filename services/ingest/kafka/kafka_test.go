package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"go.uber.org/goleak"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/ingest/input"
	"github.com/auditlens/auditlens/services/ingest/internal/testlog"
	"github.com/auditlens/auditlens/services/ingest/internal/testnats"
	"github.com/auditlens/auditlens/services/ingest/kafka"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

const hub = "aks-audit"

// eventHubs is kfake standing in for an Event Hubs namespace's Kafka endpoint: TLS, SASL
// PLAIN with the user $ConnectionString and the connection string as password.
type eventHubs struct {
	cluster  *kfake.Cluster
	connFile string
	caFile   string
	connStr  string
	ca       *x509.CertPool
}

func startEventHubs(t *testing.T) *eventHubs {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	e := &eventHubs{connFile: filepath.Join(dir, "conn"), caFile: filepath.Join(dir, "ca.pem"), ca: x509.NewCertPool()}
	e.ca.AddCert(mustParse(t, der))
	e.connStr = "Endpoint=sb://127.0.0.1:" + strconv.Itoa(port) + "/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=c2VjcmV0;EntityPath=" + hub
	e.cluster, err = kfake.NewCluster(kfake.Ports(port), kfake.EnableSASL(), kfake.Superuser("PLAIN", "$ConnectionString", e.connStr),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}}), kfake.SeedTopics(4, hub))
	if err != nil {
		enginetest.Unavailable(t, "kfake", err)
	}
	t.Cleanup(e.cluster.Close)
	if err := os.WriteFile(e.connFile, []byte(e.connStr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// produce sends bodies as Event Hubs would deliver them over Kafka.
func (e *eventHubs) produce(t *testing.T, bodies [][]byte) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.DialTLSConfig(&tls.Config{RootCAs: e.ca}),
		kgo.SASL(plain.Auth{User: "$ConnectionString", Pass: e.connStr}.AsMechanism()), kgo.DefaultProduceTopic(hub))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i, b := range bodies {
		rs = append(rs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: b})
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// aksBodies are Event Hubs message bodies as an AKS diagnostic setting writes them: each a
// {"records":[...]} of per kube-audit records (genuine events with unique auditIDs) and one
// kube-apiserver klog record.
func aksBodies(t *testing.T, n, per int) (bodies [][]byte, want []string) {
	ev := testlog.Load(t)
	const id = "/SUBSCRIPTIONS/0000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/AKS-PROD"
	k := 0
	for range n {
		recs := []map[string]any{{"category": "kube-apiserver", "resourceId": id, "properties": map[string]any{"log": "I1130 12:00:00.000000 1 klog text\n"}}}
		for range per {
			line, key := ev.Event(k)
			k++
			want = append(want, "auditlens.events.aks-prod aks-prod/"+key)
			recs = append(recs, map[string]any{"category": "kube-audit", "resourceId": id, "properties": map[string]any{"log": string(line) + "\n"}})
		}
		b, _ := json.Marshal(map[string]any{"records": recs})
		bodies = append(bodies, b)
	}
	return bodies, want
}

func checkOnce(t *testing.T, got map[string]int, total int, want []string) {
	if total != len(want) {
		t.Errorf("%d events on the bus, want %d", total, len(want))
	}
	for _, id := range want {
		if got[id] != 1 {
			t.Fatalf("%s stored %d times", id, got[id])
		}
	}
}

// TestEventHubs: AKS records read over TLS and SASL PLAIN with the connection string land
// on the bus once each under the cluster the resource id names; a wrong connection string
// reads nothing.
func TestEventHubs(t *testing.T) {
	e := startEventHubs(t)
	n := testnats.Start(t)
	bodies, want := aksBodies(t, 40, 10)
	e.produce(t, bodies)
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := kafka.New(kafka.Config{EventHubsConnectionStringFile: e.connFile, TLSCA: e.caFile, Group: "auditlens-ingest"}, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testkit.Eventually(t, 2*time.Minute, "every event", func() bool { _, total := n.IDs(t, bus.Events); return total >= len(want) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := n.Stored(t, bus.Events); got != uint64(len(bodies)) {
		t.Errorf("%d messages on the bus for %d records: want each record's events in one batch", got, len(bodies))
	}
	got, total := n.IDs(t, bus.Events)
	checkOnce(t, got, total, want)

	wrong := filepath.Join(t.TempDir(), "conn")
	if err := os.WriteFile(wrong, []byte(e.connStr[:len(e.connStr)-len(hub)-len(";EntityPath=")]+"x;EntityPath="+hub), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = kafka.New(kafka.Config{EventHubsConnectionStringFile: wrong, TLSCA: e.caFile, Group: "other"}, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", MaxEventSize: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if _, after := n.IDs(t, bus.Events); after != total {
		t.Fatalf("a wrong connection string stored %d events", after-total)
	}
}

// TestKill9 kills the ingest process -9 while it reads the event hub and restarts it:
// every event is stored exactly once (offsets are committed only after the bus stored the
// records' events).
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the ingest binary")
	}
	bin := filepath.Join(t.TempDir(), "ingest")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ingest").CombinedOutput(); err != nil {
		t.Fatalf("build ingest: %v\n%s", err, out)
	}
	e := startEventHubs(t)
	n := testnats.Start(t)
	bodies, want := aksBodies(t, 1500, 20)
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "--eventhubs-connection-string-file", e.connFile, "--kafka-source-tls-ca", e.caFile,
			"--nats-url", n.URL(), "--cluster", "fallback", "--metrics-addr", "", "--log-format", "json")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	// The hub fills while ingest reads it; ingest is killed once a third of the records are
	// on the bus (each record's events are one batch message), or half-way through
	// producing, and the rest is produced while it is down.
	cmd := run()
	e.produce(t, bodies[:50])
	testkit.Eventually(t, 2*time.Minute, "the first records stored", func() bool { return n.Stored(t, bus.Events) >= 1 })
	killed := false
	for i := 50; i < len(bodies); i += 50 {
		e.produce(t, bodies[i:min(i+50, len(bodies))])
		if !killed && (n.Stored(t, bus.Events) >= uint64(len(bodies)/3) || i >= len(bodies)/2) {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed = true
		}
	}
	_, at := n.IDs(t, bus.Events)
	t.Logf("killed after %d of %d events", at, len(want))
	if at == 0 || at >= len(want) {
		t.Fatalf("killed after %d of %d events: want a kill mid-way", at, len(want))
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
	checkOnce(t, got, total, want)
}

// TestClusterNames: records naming clusters the bus has no subject token for (a resource id
// with a name longer than 64 characters, one with a dot) and one whose name the bus cannot
// carry at all (a control character) are read with a normal one: the normal event and the
// two long names' events are stored (under their names), the last is dead-lettered alone, and
// the next poll's record is stored too. Before, the whole poll was retried for ever and
// nothing after it was stored.
func TestClusterNames(t *testing.T) {
	e := startEventHubs(t)
	n := testnats.Start(t)
	ev := testlog.Load(t)
	body := func(name string, k int) ([]byte, string) {
		id := "/SUBSCRIPTIONS/0000/RESOURCEGROUPS/RG/PROVIDERS/MICROSOFT.CONTAINERSERVICE/MANAGEDCLUSTERS/" + name
		line, key := ev.Event(k)
		b, _ := json.Marshal(map[string]any{"records": []map[string]any{{"category": "kube-audit", "resourceId": id, "properties": map[string]any{"log": string(line)}}}})
		return b, key
	}
	long := "aks-" + strings.Repeat("l", 76)
	var bodies [][]byte
	var keys []string
	for i, name := range []string{"normal", long, "a.b", "bad\x07name"} {
		b, key := body(name, i)
		bodies, keys = append(bodies, b), append(keys, key)
	}
	e.produce(t, bodies)
	b := n.Open(t)
	s, err := kafka.New(kafka.Config{EventHubsConnectionStringFile: e.connFile, TLSCA: e.caFile, Group: "auditlens-ingest"}, input.MustEnv(input.Env{Bus: b, Cluster: "fallback", Node: "n1", MaxEventSize: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testkit.Eventually(t, 2*time.Minute, "three events and a dead letter", func() bool {
		_, total := n.IDs(t, bus.Events)
		return total >= 3 && n.Count(t, bus.DeadLetter) >= 1
	})
	later, laterKey := body("normal", 10)
	e.produce(t, [][]byte{later})
	testkit.Eventually(t, 2*time.Minute, "the next poll's event", func() bool { _, total := n.IDs(t, bus.Events); return total >= 4 })
	if err := s.Ready(); err != nil {
		t.Errorf("ready: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _ := n.IDs(t, bus.Events)
	for i, name := range []string{"normal", long, "a.b"} {
		if id := "auditlens.events." + bus.ClusterToken(name) + " " + bus.EventID(name, keys[i]); got[id] != 1 {
			t.Errorf("%s stored %d times (have %v)", id, got[id], got)
		}
	}
	if id := "auditlens.events.normal " + bus.EventID("normal", laterKey); got[id] != 1 {
		t.Errorf("the next poll's event %s stored %d times", id, got[id])
	}
	dl := n.Messages(t, bus.DeadLetter)
	if len(dl) != 1 || dl[0].Header.Get(bus.HeaderReasonLabel) != "unpublishable" {
		t.Fatalf("dead letters: %d, want 1 labelled unpublishable", len(dl))
	}
}
