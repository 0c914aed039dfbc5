package weekly_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// TestBuildOnClusterMatchesOneServer writes the same findings to one server and, through
// the Distributed table, to 2 shards x 2 replicas (each block twice, as a retried insert
// sends it): weekly.Build gives the same report on both, for every cluster and target, and
// the ledger of sent weeks (a replicated table on every server) reads back at once what it
// recorded, and every server gets it.
func TestBuildOnClusterMatchesOneServer(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	cl := c.Store(t, "auditlens")
	_, one := chtest.ServerStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := newSeed()
	var b store.Block
	for _, f := range s.findings() {
		b.Append(f)
	}
	at := time.Now()
	for _, st := range []*store.Store{one, cl, cl} {
		if err := st.WriteBlockAt(ctx, &b, at); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReplicated(t, "auditlens") // reads may go to either replica of a shard
	now := func() time.Time { return time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) }
	for _, cluster := range []string{"prod", "staging"} {
		for _, target := range []weekly.Version{{Major: 1, Minor: 25}, {Major: 1, Minor: 32}} {
			o := weekly.Options{Cluster: cluster, Target: target, WeekEnding: s.week, TrendWeeks: 4, Now: now}
			want, err := weekly.Build(ctx, one.DB(), o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := weekly.Build(ctx, cl.DB(), o)
			if err != nil {
				t.Fatal(err)
			}
			if cluster == "prod" && want.Totals.Findings == 0 {
				t.Fatal("the seed gives no findings this week: the comparison proves nothing")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, target %s: the cluster's report differs from one server's:\n got %+v\nwant %+v", cluster, target, got, want)
			}
		}
	}

	l := weekly.Ledger{DB: cl.DB(), Ins: cl}
	target := weekly.Version{Major: 1, Minor: 25}
	sent := time.Now().UTC().Truncate(time.Second)
	for _, st := range []string{weekly.StatusSending, weekly.StatusSent} {
		if err := l.Record(ctx, "prod", s.week, target, []string{"ops@example.com"}, st, sent); err != nil {
			t.Fatal(err)
		}
	}
	e, err := l.Latest(ctx, "prod", s.week, target)
	if err != nil || e.Status != weekly.StatusSent {
		t.Errorf("ledger on the cluster: %+v, %v; want sent (read right after the write)", e, err)
	}
	for _, srv := range c.Servers() {
		db := srv.DB(t)
		testkit.Eventually(t, time.Minute, "the ledger on shard "+srv.Cluster.Shard+" replica "+srv.Cluster.Replica, func() bool {
			var n uint64
			return db.QueryRow("SELECT count() FROM auditlens.weekly_reports").Scan(&n) == nil && n == 2
		})
	}
}
