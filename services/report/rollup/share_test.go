package rollup_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// sharedRow is a row of sharedQuery: rand64 differs on every read of the store, so two
// answers with the same rand values are one read.
type sharedRow struct {
	s string
	n uint32
	a []string
	r uint64
}

const (
	sharedWhat  = "numbers"
	sharedQuery = `SELECT toString(number), toUInt32(number), [toString(number), 'x'], rand64() FROM system.numbers LIMIT ?`
)

// readShared reads limit rows of sharedQuery under ctx, calling first (if any) at the first
// row: its error ends the read.
func readShared(ctx context.Context, st *store.Store, limit int, first func() error) ([]sharedRow, error) {
	var out []sharedRow
	err := rollup.Query(ctx, st.DB(), sharedWhat, sharedQuery, []any{limit}, func(r rollup.Row) error {
		var x sharedRow
		if err := r.Scan(&x.s, &x.n, &x.a, &x.r); err != nil {
			return err
		}
		if len(out) == 0 && first != nil {
			if err := first(); err != nil {
				return err
			}
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// waitFor waits until s's read of limit rows of sharedQuery is under way with n requests
// waiting for it (n = 0: under way, nobody waiting yet).
func waitFor(t *testing.T, s *rollup.Reads, limit, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for rollup.Waiting(s, sharedWhat, sharedQuery, []any{limit}) != n {
		if time.Now().After(deadline) {
			t.Errorf("%d waiting for the read of %d rows, want %d", rollup.Waiting(s, sharedWhat, sharedQuery, []any{limit}), limit, n)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Reads asked the same (name, SQL, arguments) while one is under way wait for it and scan
// its rows (copies of them): the store is read once. A request that arrived before a read
// ended takes its answer after it ended too; one that arrived after it reads the store
// itself, as does a read asked otherwise. A read that failed is read again by each that
// waited for it; one that stops waiting (its client left) returns at once.
func TestReadsShareOneRead(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		var s rollup.Reads
		// fresh is the context of a request arriving now.
		fresh := func() context.Context { return rollup.Shared(context.Background(), &s, time.Now()) }
		ctx := fresh()
		if rollup.Shared(ctx, nil, time.Time{}) != ctx {
			t.Error("Shared with no Reads changed the context")
		}

		// The first read holds at its first row until three others wait for it; meanwhile
		// a read of other arguments is read alone, and ends.
		answers := make([][]sharedRow, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		wg.Go(func() {
			answers[0], errs[0] = readShared(ctx, st, 3, func() error {
				other, err := readShared(ctx, st, 2, nil)
				if err != nil || len(other) != 2 {
					t.Errorf("a read of other arguments under way beside it: %d rows, %v", len(other), err)
				}
				waitFor(t, &s, 3, 3)
				return nil
			})
		})
		waitFor(t, &s, 3, 0)
		for i := 1; i < 4; i++ {
			wg.Go(func() { answers[i], errs[i] = readShared(ctx, st, 3, nil) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
		}
		if len(answers[0]) != 3 || answers[0][2].s != "2" || answers[0][2].n != 2 || !reflect.DeepEqual(answers[0][2].a, []string{"2", "x"}) {
			t.Fatalf("the first read: %+v", answers[0])
		}
		for i := 1; i < 4; i++ {
			if !reflect.DeepEqual(answers[i], answers[0]) {
				t.Errorf("read %d: %+v, want the first read's %+v", i, answers[i], answers[0])
			}
		}
		if n := s.Shared(); n != 3 {
			t.Errorf("%d reads shared, want 3", n)
		}
		answers[1][0].a[0] = "changed"
		if answers[0][0].a[0] != "0" || answers[2][0].a[0] != "0" {
			t.Error("a slice scanned by one reader changed another's")
		}

		// A request that arrived before it ended takes its answer after it ended too; one
		// that arrived after asks the store again.
		late, err := readShared(ctx, st, 3, nil)
		if err != nil || !reflect.DeepEqual(late, answers[0]) || s.Shared() != 4 {
			t.Errorf("a request under way when the read ended: %+v, %v (shared %d), want the read's %+v", late, err, s.Shared(), answers[0])
		}
		ctx = fresh()
		again, err := readShared(ctx, st, 3, nil)
		if err != nil || len(again) != 3 {
			t.Fatalf("a read after: %d rows, %v", len(again), err)
		}
		if again[0].r == answers[0][0].r || s.Shared() != 4 {
			t.Errorf("a request that arrived after the read ended took its answer (shared %d)", s.Shared())
		}

		// The first read fails after one other joined it: that one reads itself.
		ctx = fresh()
		boom := errors.New("boom")
		var joined []sharedRow
		var joinedErr error
		wg.Go(func() {
			_, err := readShared(ctx, st, 3, func() error { waitFor(t, &s, 3, 1); return boom })
			if !errors.Is(err, boom) {
				t.Errorf("the failing read: %v", err)
			}
		})
		waitFor(t, &s, 3, 0)
		wg.Go(func() { joined, joinedErr = readShared(ctx, st, 3, nil) })
		wg.Wait()
		if joinedErr != nil || len(joined) != 3 || s.Shared() != 4 {
			t.Errorf("after the read it waited for failed: %d rows, %v, shared %d", len(joined), joinedErr, s.Shared())
		}

		// One waiting whose client leaves returns at once, without waiting for the read.
		ctx = fresh()
		left, leave := context.WithCancel(ctx)
		release := make(chan struct{})
		wg.Go(func() {
			if _, err := readShared(ctx, st, 3, func() error { <-release; return nil }); err != nil {
				t.Errorf("the read left by the one waiting: %v", err)
			}
		})
		waitFor(t, &s, 3, 0)
		gone := make(chan error, 1)
		go func() { _, err := readShared(left, st, 3, nil); gone <- err }()
		waitFor(t, &s, 3, 1)
		leave()
		select {
		case err := <-gone:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the one that left: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the one that left still waits for the read")
		}
		close(release)
		wg.Wait()

		// At most MaxEnded answers are kept, the newest: the oldest is read again.
		ctx = fresh()
		for limit := range rollup.MaxEnded + 1 {
			if _, err := readShared(ctx, st, limit+1, nil); err != nil {
				t.Fatal(err)
			}
		}
		before := s.Shared()
		if _, err := readShared(ctx, st, rollup.MaxEnded+1, nil); err != nil || s.Shared() != before+1 {
			t.Errorf("the newest answer: %v, shared %d -> %d, want it taken", err, before, s.Shared())
		}
		if _, err := readShared(ctx, st, 1, nil); err != nil || s.Shared() != before+1 {
			t.Errorf("the oldest answer past MaxEnded: %v, shared %d -> %d, want it read again", err, before, s.Shared())
		}
	})
}

// A replayed row sets each destination to its value, a zero for a NULL, and refuses a
// destination of another type or count.
func TestReplayedRow(t *testing.T) {
	var s string
	var n uint32
	var a []string
	if err := rollup.Replayed("x", nil, []string{"y"}).Scan(&s, &n, &a); err != nil || s != "x" || n != 0 || a[0] != "y" {
		t.Errorf("replayed: %q %d %v, %v", s, n, a, err)
	}
	if err := rollup.Replayed("x").Scan(&n); err == nil {
		t.Error("a string into a uint32: no error")
	}
	if err := rollup.Replayed("x", "y").Scan(&s); err == nil {
		t.Error("two values into one destination: no error")
	}
	if err := rollup.Replayed("x").Scan(s); err == nil {
		t.Error("a destination that is not a pointer: no error")
	}
}

// Two requests reading the same span of the same builds write the same SQL and arguments,
// whatever order the plan met the days in: else no read of theirs is ever shared (Reads).
func TestDaysWriteTheSameRead(t *testing.T) {
	defer rollup.SetMargin(0)()
	chtest.EachEngine(t, func(t *testing.T, _ chtest.Engine, st *store.Store) {
		db := st.DB()
		tables := rollup.TablesFor("findings")
		yesterday := chtest.ServerNow(t, db).Truncate(24*time.Hour).AddDate(0, 0, -1)
		var fs []*auditlensv1.Finding
		for i := range 8 {
			fs = append(fs, finding(fmt.Sprintf("d%d", i), "alice", "kubectl/v1.20.0", "10.0.0.9", yesterday.AddDate(0, 0, -i).Add(time.Hour)))
		}
		if err := st.WriteFindings(context.Background(), fs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // a build in the second of a change is not current
		if _, err := rollup.Compact(context.Background(), db, tables); err != nil {
			t.Fatal(err)
		}
		from, to := yesterday.AddDate(0, 0, -7), yesterday.AddDate(0, 0, 1)
		var first string
		for i := range 20 {
			src, args, err := rollup.Days(rollup.Snapshot(context.Background()), db, tables, rollup.Filter{Cluster: "prod", From: from, To: to})
			if err != nil {
				t.Fatal(err)
			}
			if key := fmt.Sprint(src, args); i == 0 {
				first = key
			} else if key != first {
				t.Fatalf("read %d of the same builds:\n%s\nthe first:\n%s", i, key, first)
			}
		}
	})
}
