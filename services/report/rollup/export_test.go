package rollup

import (
	"context"
	"database/sql"
	"time"
)

// SetMargin sets Margin for a test, so that a build a second after a change is current.
func SetMargin(d time.Duration) (restore func()) {
	old := margin
	margin = d
	return func() { margin = old }
}

// SetCleanAfter sets CleanAfter for a test.
func SetCleanAfter(d time.Duration) (restore func()) {
	old := cleanAfter
	cleanAfter = d
	return func() { cleanAfter = old }
}

// SetNow makes Compact act as if the server's clock read now.
func SetNow(now time.Time) (restore func()) {
	old := clock
	clock = func(time.Time) time.Time { return now }
	return func() { clock = old }
}

// PrefixedDays returns the days ("YYYY-MM-DD cluster") of cluster in [from, to) that Days
// reads from a prefix and the states of the later hours.
func PrefixedDays(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time) ([]string, error) {
	p, err := plan(ctx, db, t, cluster, from, to)
	return p.prefixed, err
}

// CleanDays returns the days ("YYYY-MM-DD cluster") of cluster in [from, to) that Days reads
// from their builds.
func CleanDays(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time) ([]string, error) {
	p, err := plan(ctx, db, t, cluster, from, to)
	if err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	err = each(ctx, db, `SELECT toString(cluster), toString(toDate(hour)) AS d, toUInt32(0), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE (? = '' OR cluster = ?) AND hour >= toDateTime(?) AND hour < toDateTime(?) GROUP BY cluster, d`,
		[]any{cluster, cluster, from.Unix(), to.Unix()}, func(c, d string, _ uint32, _ uint64) { changed[pair(d, c)] = true })
	if err != nil {
		return nil, err
	}
	for _, d := range append(p.dirty, p.prefixed...) {
		delete(changed, d)
	}
	var out []string
	for d := range changed {
		out = append(out, d)
	}
	return out, nil
}

// Remember is remember, for the snapshot's own test.
func Remember[T any](ctx context.Context, key string, read func() (T, error)) (T, error) {
	return remember(ctx, key, read)
}

// Waiting returns how many requests wait for s's read of what, q and args under way (-1: no
// such read under way).
func Waiting(s *Reads, what, q string, args []any) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.under[readKey(what, q, args)]
	if !ok {
		return -1
	}
	return r.waiting
}

// Replayed is a recorded row (Reads) to scan again.
func Replayed(vals ...any) Row { return replayed(vals) }
