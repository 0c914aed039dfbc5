package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

// TestClusterSchema migrates a 2 x 2 cluster: every server gets the replicated local tables
// and the Distributed tables of the names users query, a second run applies nothing, and a
// block written twice with the same ingested time (a retried insert) is stored once on each
// replica of each shard, while the rows of one identity stay on one shard.
func TestClusterSchema(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	// A guard against a hang, not a bound: on a machine compiling beside it (a new CI
	// machine builds Kubernetes meanwhile) the whole test took over three minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	st := c.Store(t, "auditlens")
	if st.Cluster() != chtest.ClusterName {
		t.Fatalf("Cluster() = %q", st.Cluster())
	}
	did, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 30})
	if err != nil || len(did) != 0 {
		t.Fatalf("second migrate: applied %v, %v; want nothing", did, err)
	}
	// Writes are synchronous: an acknowledged insert is on the shards, not queued.
	var syncInsert string
	if err := st.DB().QueryRowContext(ctx, "SELECT value FROM system.settings WHERE name = 'insert_distributed_sync'").Scan(&syncInsert); err != nil || syncInsert != "1" {
		t.Errorf("insert_distributed_sync on the store's connections: %q, %v; want 1", syncInsert, err)
	}
	applied, err := st.AppliedMigrations(ctx)
	if err != nil || len(applied) != len(store.Migrations) {
		t.Fatalf("applied migrations %v, %v; want %d", applied, err, len(store.Migrations))
	}

	want := map[string]string{
		"findings": "Distributed", "findings_local": "ReplicatedReplacingMergeTree",
		"weekly_reports": "ReplicatedReplacingMergeTree", "schema_migrations": "ReplicatedReplacingMergeTree",
		"finding_days_current": "View",
		"stream_minutes":       "Distributed", "stream_minutes_local": "ReplicatedAggregatingMergeTree", "stream_minutes_mv": "MaterializedView",
		"event_minutes": "Distributed", "event_minutes_local": "ReplicatedReplacingMergeTree",
		"finding_rows": "Distributed", "finding_rows_local": "ReplicatedMergeTree",
		"finding_builds": "Distributed", "finding_builds_local": "ReplicatedMergeTree",
		"finding_requests": "Distributed", "finding_requests_local": "ReplicatedReplacingMergeTree", "finding_requests_mv": "MaterializedView",
		"finding_hour_states": "Distributed", "finding_hour_states_local": "ReplicatedAggregatingMergeTree", "finding_hour_states_by_request_mv": "MaterializedView",
		"blocker_names": "Distributed", "blocker_names_local": "ReplicatedReplacingMergeTree",
		"caller_names": "Distributed", "caller_names_local": "ReplicatedReplacingMergeTree",
		"finding_hour_changes": "Distributed", "finding_hour_changes_local": "ReplicatedAggregatingMergeTree", "finding_hour_changes_mv": "MaterializedView",
		"control_plane_sightings": "Distributed", "control_plane_sightings_local": "ReplicatedReplacingMergeTree",
		"coverage_sightings": "Distributed", "coverage_sightings_local": "ReplicatedReplacingMergeTree",
		"migration_sightings": "Distributed", "migration_sightings_local": "ReplicatedReplacingMergeTree",
		"review_sightings": "Distributed", "review_sightings_local": "ReplicatedReplacingMergeTree",
		"retention_settings": "ReplicatedReplacingMergeTree", "leases": "ReplicatedReplacingMergeTree",
	}
	for _, srv := range c.Servers() {
		db := srv.DB(t)
		got := map[string]string{}
		rows, err := db.QueryContext(ctx, "SELECT name, engine FROM system.tables WHERE database = 'auditlens'")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n, e string
			if err := rows.Scan(&n, &e); err != nil {
				t.Fatal(err)
			}
			got[n] = e
		}
		_ = rows.Close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("shard %s replica %s tables:\n got %v\nwant %v", srv.Cluster.Shard, srv.Cluster.Replica, got, want)
		}
	}

	var b store.Block
	for i := range 200 {
		f := finding("psp", fmt.Sprintf("a%03d", i), fmt.Sprintf("u%d", i%7), day.Add(time.Duration(i)*time.Minute))
		b.Append(f)
		if i%10 == 0 { // the same finding under another rule: its own identity, same shard
			f.RuleId = "removed-api"
			b.Append(f)
		}
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for range 2 {
		if err := st.WriteBlockAt(ctx, &b, at); err != nil {
			t.Fatal(err)
		}
	}
	const findings = 220
	// Each shard registered one block of findings: the second write was de-duplicated.
	// (Counting rows would not tell: a replacing merge may collapse duplicate rows.)
	if got := blocks(t, c, "findings_local"); !slices.Equal(got, []uint64{1, 1}) {
		t.Fatalf("blocks per shard after a retried insert: %v, want [1 1] (stored once)", got)
	}
	c.WaitReplicated(t, "auditlens")
	var n uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT count() FROM findings").Scan(&n); err != nil || n != findings {
		t.Fatalf("rows through the Distributed table after a retried insert: %d, %v; want %d (stored once)", n, err, findings)
	}
	// The same findings with another ingested time are another block: stored again, and
	// still counted once by identity.
	if err := st.WriteBlockAt(ctx, &b, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := blocks(t, c, "findings_local"); !slices.Equal(got, []uint64{2, 2}) {
		t.Fatalf("blocks per shard after a new block: %v, want [2 2]", got)
	}
	c.WaitReplicated(t, "auditlens")
	var ids uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(cluster, audit_id, rule_id) FROM findings").Scan(&ids); err != nil || ids != findings {
		t.Fatalf("after a new block of the same findings: %d findings, %v; want %d", ids, err, findings)
	}
	perShard := c.ShardIdentities(t, "auditlens.findings_local")
	var sum int
	for i, ids := range perShard {
		sum += len(ids)
		if len(ids) == 0 {
			t.Errorf("shard %d holds no findings: the sharding key does not spread them", i+1)
		}
	}
	if sum != findings {
		t.Errorf("rows over the shards: %d, want %d (each identity on one shard)", sum, findings)
	}
	var daily uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT toUInt64(sum(findings)) FROM finding_days_current").Scan(&daily); err != nil || daily != uint64(findings) {
		t.Errorf("finding_days_current over the Distributed tables: %d, %v; want %d", daily, err, findings)
	}
	// Heartbeats through the Distributed event_minutes, twice (a redelivery) and from a
	// second classify replica with a smaller count: one minute per cluster and minute, with
	// the largest count, on whichever server reads.
	ms := []store.EventMinute{{Cluster: "prod", Minute: day, Events: 9}, {Cluster: "stage", Minute: day, Events: 1}, {Cluster: "prod", Minute: day.Add(time.Minute), Events: 4}}
	for _, w := range [][]store.EventMinute{ms, ms, {{Cluster: "prod", Minute: day, Events: 3}}} {
		if err := st.WriteEventMinutes(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReplicated(t, "auditlens")
	for _, srv := range c.Servers() {
		var minutes, events uint64
		err := srv.DB(t).QueryRowContext(ctx, "SELECT count(), sum(e) FROM (SELECT cluster, minute, max(events) AS e FROM auditlens.event_minutes GROUP BY cluster, minute)").Scan(&minutes, &events)
		if err != nil || minutes != 3 || events != 14 {
			t.Errorf("shard %s replica %s: event_minutes %d minutes of %d events, %v; want 3 minutes of 14", srv.Cluster.Shard, srv.Cluster.Replica, minutes, events, err)
		}
	}
	// Control-plane sightings through the Distributed table, twice and with an older minute
	// (another classify replica): the newest minute of each release, on whichever server reads.
	ss := []store.ControlPlaneSighting{
		{Cluster: "prod", Component: "kube-apiserver", Version: kubeversion.MustParse("1.37"), Seen: day.Add(time.Minute)},
		{Cluster: "stage", Component: "kube-apiserver", Version: kubeversion.MustParse("1.36"), Seen: day},
	}
	older := []store.ControlPlaneSighting{{Cluster: "prod", Component: "kube-apiserver", Version: kubeversion.MustParse("1.37"), Seen: day}}
	for _, w := range [][]store.ControlPlaneSighting{ss, ss, older} {
		if err := st.WriteControlPlaneSightings(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReplicated(t, "auditlens")
	for _, srv := range c.Servers() {
		var releases, newest uint64
		err := srv.DB(t).QueryRowContext(ctx, "SELECT count(), sum(s) FROM (SELECT cluster, component, version, toUInt64(max(seen)) AS s FROM auditlens.control_plane_sightings GROUP BY cluster, component, version)").Scan(&releases, &newest)
		if want := uint64(2*day.Unix() + 60); err != nil || releases != 2 || newest != want {
			t.Errorf("shard %s replica %s: control_plane_sightings %d releases, newest minutes summing to %d, %v; want 2, %d", srv.Cluster.Shard, srv.Cluster.Replica, releases, newest, err, want)
		}
	}

	// The retention: recorded on every server, and Expire deletes the days past it from every
	// shard and replica (mutations through distributed DDL, replicated).
	if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 3}); err != nil {
		t.Fatal(err)
	}
	kept := retentionFixture(t, st)
	c.WaitReplicated(t, "auditlens")
	if _, err := st.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	for _, srv := range c.Servers() {
		db := srv.DB(t)
		var left map[string]uint64
		testkit.Eventually(t, time.Minute, "every replica deleted the days past the retention", func() bool {
			left = callersBefore(t, db, "auditlens", "_local", kept)
			return len(left) == 0
		})
		var r uint32
		if err := db.QueryRowContext(ctx, "SELECT argMax(days, version) FROM auditlens.retention_settings WHERE kind = 'callers'").Scan(&r); err != nil || r != 3 {
			t.Errorf("shard %s replica %s: retention %d days, %v; want 3", srv.Cluster.Shard, srv.Cluster.Replica, r, err)
		}
	}
	var recent uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT uniqExact(audit_id) FROM findings").Scan(&recent); err != nil || recent != 2 {
		t.Errorf("findings kept on the cluster: %d, %v; want 2", recent, err)
	}
}

// blocks counts, per shard, the insert blocks that table's replicas registered in ZooKeeper
// for de-duplication.
func blocks(t *testing.T, c *chtest.Cluster, table string) []uint64 {
	t.Helper()
	db := c.Shards[0][0].DB(t)
	var out []uint64
	for _, shard := range c.Shards {
		var n uint64
		path := "/clickhouse/tables/" + shard[0].Cluster.Shard + "/auditlens/" + table + "/blocks"
		if err := db.QueryRow("SELECT count() FROM system.zookeeper WHERE path = ?", path).Scan(&n); err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		out = append(out, n)
	}
	return out
}
