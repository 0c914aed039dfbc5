package rollup

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"time"
)

// clock turns the server's time into the time Compact acts at (tests move it).
var clock = func(server time.Time) time.Time { return server }

// Built counts what a compaction built.
type Built struct {
	// Days are the cluster days built whole, Prefixes the builds of today's first hours.
	Days, Prefixes int
}

// Compact builds, for every cluster, each day that is over (it ended Margin ago by the
// server's clock) and changed since its newest whole build or never had one, and the prefix
// of the day under way: its hours that are over, when one of them changed since the newest
// prefix of them all. Builds of the same day by two report replicas at once are harmless:
// each is complete, and readers take the newest.
func Compact(ctx context.Context, db *sql.DB, t Tables) (Built, error) {
	var built Built
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
		return built, fmt.Errorf("compact: read the server's clock: %w", err)
	}
	at := clock(time.Unix(int64(now), 0)).Add(-margin).UTC()
	today := at.Truncate(24 * time.Hour)
	type clusterDay struct{ cluster, day string }
	changed := map[clusterDay]uint32{}
	err := each(ctx, db, `SELECT toString(cluster), toString(toDate(hour)) AS d, maxMerge(changed), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE hour < toDateTime(?) GROUP BY cluster, d`, []any{today.Unix()}, func(c, d string, ts uint32, _ uint64) { changed[clusterDay{c, d}] = ts })
	if err != nil {
		return built, fmt.Errorf("compact: read the days' changes: %w", err)
	}
	// The newest whole build of each day: its end is the next midnight.
	builds := map[clusterDay]uint32{}
	err = each(ctx, db, `SELECT toString(cluster), toString(day), max(built), toUInt32(0), toUInt64(0) FROM `+t.Builds+`
WHERE day < toDate(?) AND `+Whole+` GROUP BY cluster, day`, []any{Day(today)}, func(c, d string, ts uint32, _ uint64) { builds[clusterDay{c, d}] = ts })
	if err != nil {
		return built, fmt.Errorf("compact: read the days' builds: %w", err)
	}
	for cd, c := range changed {
		if b, ok := builds[cd]; ok && covers(b, c) {
			continue
		}
		start, err := time.Parse(DayFormat, cd.day)
		if err != nil {
			return built, err
		}
		if err := buildHours(ctx, db, t, cd.cluster, start, start.AddDate(0, 0, 1)); err != nil {
			return built, err
		}
		built.Days++
	}
	n, err := compactPrefixes(ctx, db, t, at)
	built.Prefixes = n
	return built, err
}

// compactPrefixes builds, for every cluster whose day under way at at has findings in the
// hours before at's, the prefix of those hours unless a current one was built.
func compactPrefixes(ctx context.Context, db *sql.DB, t Tables, at time.Time) (int, error) {
	start, until := at.Truncate(24*time.Hour), at.Truncate(time.Hour)
	if !until.After(start) {
		return 0, nil
	}
	changed := map[string]uint32{}
	err := each(ctx, db, `SELECT toString(cluster), '', maxMerge(changed), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE hour >= toDateTime(?) AND hour < toDateTime(?) GROUP BY cluster`, []any{start.Unix(), until.Unix()},
		func(c, _ string, ts uint32, _ uint64) { changed[c] = ts })
	if err != nil {
		return 0, fmt.Errorf("compact: read the hours' changes: %w", err)
	}
	builds := map[string]uint32{}
	err = each(ctx, db, `SELECT toString(cluster), '', max(built), toUInt32(0), toUInt64(0) FROM `+t.Builds+`
WHERE day = toDate(?) AND until = toDateTime(?) GROUP BY cluster`, []any{Day(start), until.Unix()},
		func(c, _ string, ts uint32, _ uint64) { builds[c] = ts })
	if err != nil {
		return 0, fmt.Errorf("compact: read the prefixes: %w", err)
	}
	n := 0
	for c, ch := range changed {
		if b, ok := builds[c]; ok && covers(b, ch) {
			continue
		}
		if err := buildHours(ctx, db, t, c, start, until); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// buildHours turns the states of cluster's hours [start, until) (of one day) into rows
// under a new build id, keeps the names behind their hashes, then records the build: readers
// take the rows only once the record is there, and find the names of every row of a build
// they read.
func buildHours(ctx context.Context, db *sql.DB, t Tables, cluster string, start, until time.Time) error {
	var began uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&began); err != nil {
		return fmt.Errorf("compact %s %s: read the server's clock: %w", cluster, Day(start), err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := binary.BigEndian.Uint64(b[:]) | 1 // never 0
	hours := `FROM ` + t.HourState + `
WHERE cluster = ? AND hour >= toDateTime(?) AND hour < toDateTime(?)`
	span := []any{cluster, start.Unix(), until.Unix()}
	for _, q := range []struct {
		what, sql string
		args      []any
	}{{"build the rows", `INSERT INTO ` + t.Rows + ` (cluster, day, ` + Key + `, blocker, caller, message, findings, first_seen, last_seen, build)
SELECT cluster, toDate(hour) AS day, ` + Key + `, any(blocker), any(caller), anyMerge(message), uniqExactMerge(findings),
  toUInt32(minMerge(first_seen)), toUInt32(maxMerge(last_seen)), toUInt64(?)
` + hours + `
GROUP BY cluster, day, ` + Key, append([]any{id}, span...)}, {"keep the blockers' names", `INSERT INTO ` + t.BlockerNames + ` (blocker, rule_id, api_group, api_version, resource, removed_in, replacement, seen)
SELECT blocker, any(rule_id), any(api_group), any(api_version), any(resource), argMax(removed_in, hour), argMax(replacement, hour),
  toDate(max(hour))
` + hours + `
GROUP BY blocker`, span}, {"keep the callers' names", `INSERT INTO ` + t.CallerNames + ` (caller, username, user_agent, source_ip, seen)
SELECT caller, any(username), any(user_agent), any(source_ip), toDate(max(hour))
` + hours + `
GROUP BY caller`, span}} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("compact %s %s until %s: %s: %w", cluster, Day(start), until.Format(time.DateTime), q.what, err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+t.Builds+` (cluster, day, until, built, build)
SELECT ?, toDate(?), toDateTime(?), toUInt32(?), toUInt64(?)`, cluster, Day(start), until.Unix(), began, id); err != nil {
		return fmt.Errorf("compact %s %s until %s: record the build: %w", cluster, Day(start), until.Format(time.DateTime), err)
	}
	return nil
}
