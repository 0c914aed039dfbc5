package rollup_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// Under one snapshot a read is made once, however many ask at once; its error too. Without
// a snapshot, every call reads.
func TestSnapshotReadsOnce(t *testing.T) {
	ctx := rollup.Snapshot(context.Background())
	if rollup.Snapshot(ctx) != ctx {
		t.Error("a snapshot inside a snapshot: want the outer one")
	}
	var reads atomic.Int32
	read := func() (int, error) { time.Sleep(10 * time.Millisecond); return int(reads.Add(1)), nil }
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v, err := rollup.Remember(ctx, "k", read); v != 1 || err != nil {
				t.Errorf("got %d, %v: want the first read's 1", v, err)
			}
		})
	}
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Errorf("%d reads under one snapshot, want 1", n)
	}
	if v, _ := rollup.Remember(ctx, "other", read); v != 2 {
		t.Errorf("another key: %d, want a read of its own (2)", v)
	}
	boom := errors.New("boom")
	for range 2 {
		if _, err := rollup.Remember(ctx, "failing", func() (int, error) { reads.Add(1); return 0, boom }); !errors.Is(err, boom) {
			t.Errorf("failing read: %v", err)
		}
	}
	if n := reads.Load(); n != 3 {
		t.Errorf("%d reads, want 3 (the failure kept)", n)
	}
	plain := context.Background()
	rollup.Remember(plain, "k", read) //nolint:errcheck // counted below
	rollup.Remember(plain, "k", read) //nolint:errcheck // counted below
	if n := reads.Load(); n != 5 {
		t.Errorf("%d reads, want 5: no snapshot, no memory", n)
	}
}

// A page's reads under one snapshot read the same builds: a build that lands between two of
// them changes neither, nor a read after the plan was read ahead (Prepare), and a read under
// a new snapshot (the next page) counts it.
func TestSnapshotReadsTheSameBuilds(t *testing.T) {
	defer rollup.SetMargin(0)()
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		db := st.DB()
		tables := rollup.TablesFor("findings")
		yesterday := chtest.ServerNow(t, db).Truncate(24*time.Hour).AddDate(0, 0, -1)
		from, to := yesterday, yesterday.AddDate(0, 0, 1)
		write := func(ids ...string) {
			t.Helper()
			var fs []*auditlensv1.Finding
			for i, id := range ids {
				fs = append(fs, finding(id, "alice", "kubectl/v1.20.0", "10.0.0.9", yesterday.Add(time.Duration(i+1)*time.Hour)))
			}
			if err := st.WriteFindings(context.Background(), fs); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1100 * time.Millisecond) // a build in the second of a change is not current
			if _, err := rollup.Compact(context.Background(), db, tables); err != nil {
				t.Fatal(err)
			}
		}
		total := func(ctx context.Context) (n uint64) {
			t.Helper()
			src, args, err := rollup.Days(ctx, db, tables, rollup.Filter{Cluster: "prod", From: from, To: to})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRowContext(ctx, `SELECT toUInt64(sum(findings)) FROM (`+src+`)`, args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		write("a1", "a2")
		page := rollup.Snapshot(context.Background())
		if n := total(page); n != 2 {
			t.Fatalf("before: %d findings, want 2", n)
		}
		// A page that had the plan read ahead (Prepare) reads the rows by that plan.
		prepared := rollup.Snapshot(context.Background())
		if err := rollup.Prepare(prepared, db, tables, rollup.Filter{Cluster: "prod", From: from, To: to}); err != nil {
			t.Fatal(err)
		}
		write("a3")
		if n := total(page); n != 2 {
			t.Errorf("the same page after a build landed: %d findings, want the 2 of its first read", n)
		}
		if n := total(prepared); n != 2 {
			t.Errorf("a page that read its plan ahead, after a build landed: %d findings, want the 2 of that plan", n)
		}
		if n := total(rollup.Snapshot(context.Background())); n != 3 {
			t.Errorf("the next page: %d findings, want 3", n)
		}
		if n := total(context.Background()); n != 3 {
			t.Errorf("no snapshot: %d findings, want 3", n)
		}
	})
}
