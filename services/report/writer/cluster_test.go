package writer

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestClusterReplicaKilled writes findings from the bus (embedded JetStream) through the
// Distributed table of a 2 shards x 2 replicas ClickHouse cluster while one replica is
// killed with SIGKILL in the middle of the stream and later restarted, twice (the server
// the writer is connected to, then a replica of the other shard). Some findings come
// twice (a classify restart re-publishing them under new message ids). In the end both
// replicas of each shard hold the same identities, the shards share none, their union is
// exactly the findings published, and uniqExact over the Distributed table (and the daily
// rollup through its Distributed table) counts each once.
func TestClusterReplicaKilled(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	st := c.Store(t, "auditlens")
	b := openBus(t)
	cfg := testConfig()
	w, stop := startWriter(t, cfg, st, b)
	ctx := context.Background()

	const total, perMsg, parts = 12000, 40, 12
	var want []string
	var msgs []bus.Message
	for i := 0; i < total; i += perMsg {
		var fs []*auditlensv1.Finding
		for j := i; j < i+perMsg; j++ {
			cl := []string{"prod", "stage", "dev"}[j%3]
			rule := []string{"removed-api", "psp", "legacy-sa-token"}[j%7%3]
			f := finding(cl, fmt.Sprintf("audit-%05d", j/2), rule) // two rules share each audit id
			fs = append(fs, f)
			want = append(want, cl+"/"+f.AuditId+"/"+rule)
		}
		msgs = append(msgs, batchMsg("prod", fmt.Sprintf("m-%d", i), fs...))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	// The first 50 messages again, under new ids: the bus cannot tell, the store must.
	for _, m := range msgs[:50] {
		m.ID = "replay-" + m.ID
		msgs = append(msgs, m)
	}
	written := func() float64 { return testutil.ToFloat64(w.m.written) }
	// First the server the writer is connected to (the DSN's first host): the client fails
	// over to another, and an insert cut off after some shards stored their part is sent
	// again. Then a replica of the other shard, which inserts for that shard may be sent to.
	kills := map[int]*chtest.Server{parts / 4: c.Shards[0][0], parts / 2: c.Shards[1][1]}
	restarts := map[int]*chtest.Server{parts/4 + 2: c.Shards[0][0], parts/2 + 2: c.Shards[1][1]}
	step := len(msgs) / parts
	for p := range parts {
		if err := b.Publish(ctx, msgs[p*step:min((p+1)*step, len(msgs))]...); err != nil {
			t.Fatal(err)
		}
		if s := kills[p]; s != nil {
			testkit.Eventually(t, time.Minute, "the messages so far written", func() bool { return written() >= float64(p*step*perMsg) })
			s.Kill()
			t.Logf("killed shard %s replica %s (SIGKILL) after %.0f findings written", s.Cluster.Shard, s.Cluster.Replica, written())
		}
		if s := restarts[p]; s != nil {
			if err := s.Start(); err != nil {
				t.Fatalf("restart shard %s replica %s: %v", s.Cluster.Shard, s.Cluster.Replica, err)
			}
			t.Logf("restarted shard %s replica %s after %.0f findings written", s.Cluster.Shard, s.Cluster.Replica, written())
		}
	}
	if rest := msgs[parts*step:]; len(rest) > 0 {
		if err := b.Publish(ctx, rest...); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 3*time.Minute, "every finding written", func() bool { return distinct(t, st) == uint64(len(want)) })
	testkit.Eventually(t, time.Minute, "every message written", func() bool { return written() >= float64(len(msgs)*perMsg) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d findings in %d messages: written %.0f, write errors %.0f", len(want), len(msgs), written(), testutil.ToFloat64(w.m.writeErrors))

	c.WaitReplicated(t, "auditlens")
	shards := c.ShardIdentities(t, "auditlens.findings_local")
	var union []string
	for i, ids := range shards {
		if len(ids) == 0 {
			t.Errorf("shard %d holds nothing", i+1)
		}
		union = append(union, ids...)
	}
	if len(union) != len(want) {
		t.Errorf("the shards hold %d identities together, want %d (each on one shard)", len(union), len(want))
	}
	slices.Sort(union)
	if !slices.Equal(union, want) {
		t.Errorf("the shards' findings differ from the findings published")
	}
	if n := distinct(t, st); n != uint64(len(want)) {
		t.Errorf("uniqExact over the Distributed table: %d, want %d", n, len(want))
	}
	var rollup uint64
	if err := st.DB().QueryRow("SELECT toUInt64(sum(findings)) FROM finding_days_current").Scan(&rollup); err != nil {
		t.Fatal(err)
	}
	if rollup != uint64(len(want)) {
		t.Errorf("finding_days_current over the Distributed tables: %d, want %d", rollup, len(want))
		for _, srv := range c.Servers() {
			var n, rows uint64
			_ = srv.DB(t).QueryRow("SELECT toUInt64(sum(n)), toUInt64(sum(r)) FROM (SELECT uniqExactMerge(findings) AS n, count() AS r FROM auditlens.finding_hour_states_local GROUP BY cluster, hour, rule_id)").Scan(&n, &rows)
			var raw uint64
			_ = srv.DB(t).QueryRow("SELECT uniqExact(cluster, audit_id, rule_id) FROM auditlens.findings_local").Scan(&raw)
			t.Logf("shard %s replica %s: finding_hour_states_local %d findings in %d rows; findings_local %d", srv.Cluster.Shard, srv.Cluster.Replica, n, rows, raw)
		}
	}
}
