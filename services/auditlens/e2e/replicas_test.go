package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/auditlens/auditlens/lib/bus/natsbus/natscluster"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/auditlens/internal/procstat"
)

// Replicas of each service share their consumer groups: 3 classify and 2 report processes,
// then one of each killed with SIGKILL mid-stream (and not restarted): the survivors take over
// what the dead held, and ClickHouse counts exactly what classify scan finds. On a 3-server
// JetStream cluster (streams of 3 replicas) several replicas take part of one cluster's work
// before the kill. On a 3-broker Kafka cluster (topics of 6 partitions x 3 replicas) the events
// of one cluster are one partition's (the key is the cluster, for per-cluster order), so one
// classify replica does that cluster's work: the one killed is the one working, and another
// takes its partitions over after the group's session timeout.
func TestReplicasShareTheWork(t *testing.T) {
	ch, db, all, events, want := recoverySetup(t)
	t.Logf("%d events, %d findings", events, len(want))
	for _, busName := range []string{"kafka", "nats"} {
		t.Run(busName, func(t *testing.T) {
			var busArgs []string
			switch busName {
			case "kafka":
				kc, err := kfake.NewCluster(kfake.NumBrokers(3))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(kc.Close)
				busArgs = []string{"--kafka-brokers", strings.Join(kc.ListenAddrs(), ","), "--kafka-partitions", "6", "--kafka-replication-factor", "3"}
			case "nats":
				nc := natscluster.Start(t, 3)
				busArgs = []string{"--nats-url", nc.URLs(), "--nats-replicas", "3"}
			}
			cluster := "replicas-" + busName
			dir := t.TempDir()
			input := filepath.Join(dir, "audit.log")
			if err := os.WriteFile(input, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			common := append([]string{"--cluster", cluster, "--log-format", "json"}, busArgs...)
			start(t, dir, "ingest", append([]string{"--metrics-addr", "", "--audit-log", input, "--checkpoint-dir", filepath.Join(dir, "cp")}, common...)...)
			var classifiers, reporters []*proc
			var classifyAddrs, reportAddrs []string
			for range 3 {
				addr := freeAddr(t)
				classifyAddrs = append(classifyAddrs, addr)
				classifiers = append(classifiers, start(t, dir, "classify", append([]string{"--metrics-addr", addr}, common...)...))
			}
			for range 2 {
				addr := freeAddr(t)
				reportAddrs = append(reportAddrs, addr)
				reporters = append(reporters, start(t, dir, "report", append([]string{"--metrics-addr", addr, "--report-page=false",
					"--clickhouse-dsn", ch.DSN("auditlens")}, common...)...))
			}
			// The log grows only once every replica is ready, so that the kill comes mid-stream
			// however long the bus and the processes took to start.
			testkit.Eventually(t, 90*time.Second, "every replica ready", func() bool {
				for _, a := range append(append([]string{}, classifyAddrs...), reportAddrs...) {
					if !ready(a) {
						return false
					}
				}
				return true
			})
			feed(t, all, input)
			count := func() int { return countStored(t, db, cluster) }
			waitFirst(t, count, len(want))
			working := func(addrs []string, metric string) (n, busiest int) {
				var most float64
				for i, a := range addrs {
					if v := procstat.Scrape(a)[metric]; v > 0 {
						n++
						if v > most {
							most, busiest = v, i
						}
					}
				}
				return n, busiest
			}
			// On JetStream, at least two classify replicas take part (all three do on a quiet
			// machine; on a loaded one the input may end before the slowest pulls anything).
			wantWorking := map[string][2]int{"nats": {2, 1}, "kafka": {1, 1}}[busName]
			var c, r int
			testkit.Eventually(t, 60*time.Second, "replicas working", func() bool {
				nc, busiestC := working(classifyAddrs, "auditlens_classify_events_total")
				nr, busiestR := working(reportAddrs, "auditlens_report_findings_written_total")
				c, r = busiestC, busiestR
				return nc >= wantWorking[0] && nr >= wantWorking[1]
			})
			before := count()
			classifiers[c].kill()
			reporters[r].kill()
			killed := time.Now()
			took := waitExact(t, db, cluster, want, killed)
			t.Logf("%s: one of 3 classify and one of 2 report killed with %d of %d findings stored: exact %s later",
				busName, before, len(want), took.Round(10*time.Millisecond))
		})
	}
}
