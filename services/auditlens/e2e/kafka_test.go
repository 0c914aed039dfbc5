package e2e

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// The same pipeline with --kafka-brokers instead of NATS: franz-go's kfake is a Kafka cluster in
// this test process, listening on real TCP ports that the three service processes dial.
// classify is killed with SIGKILL mid-stream; its group re-reads from the last committed offsets.
func TestPipelineOverKafka(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "audit.log")
	writeInput(t, input, 20)
	scan := expected(t, input)
	want := scan.keys

	kafka := []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--cluster", "e2e", "--log-format", "json", "--metrics-addr", ""}
	start(t, dir, "ingest", append([]string{"--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp")}, kafka...)...)
	classify := start(t, dir, "classify", kafka...)
	start(t, dir, "report", append([]string{"--clickhouse-dsn", ch.DSN("auditlens"), "--report-batch-size", "100", "--report-batch-max-wait", "100ms"}, kafka...)...)

	db, err := sql.Open("clickhouse", ch.DSN("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testkit.Eventually(t, 90*time.Second, "first findings", func() bool { return len(stored(t, db)) > 0 })
	classify.kill()
	t.Logf("killed classify with %d of %d findings stored", len(stored(t, db)), len(want))
	classify.start()
	testkit.Eventually(t, 120*time.Second, "every finding stored", func() bool { return len(stored(t, db)) >= len(want) })
	got := stored(t, db)
	for k := range want {
		if !got[k] {
			t.Fatalf("missing %s", k)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("stored %d distinct findings, classify scan found %d", len(got), len(want))
	}
}
