// Package rollup keeps and reads exact per-day counts of findings: one row per cluster, day,
// what was used (rule and API) and who used it (user, user agent, namespace, source IP).
//
// The console, the weekly report and the readiness gate count distinct findings over weeks
// and months. Over raw findings that is a uniqExact over every row of the window; over the
// day rows it is a sum, exact because a finding has one event_time and so lies in one day
// and one row of that day.
//
// The states are kept by event-time hour (migrations 15, 18 and 20 of package store):
// finding_hour_states is filled by a materialized view on every insert with uniqExact states
// of the findings' identities (audit id and request time: package store), so a finding stored
// twice counts once, whenever the second copy comes, and
// with the blocker and caller hashes of each row (BlockerHash, CallerHash); a second view notes
// in finding_hour_changes when each hour last received findings (a day's last change is its
// hours' newest). Merging states is cheap for a day and dear for months, so Compact
// (compact.go) turns them into plain counts in finding_rows, one build at a time, recorded in
// finding_builds (migration 16) with the server's time it began and the hour it ends at: a
// build of a day that is over ends at the next midnight, a build of the day under way (a
// prefix) at the start of the hour under way; it keeps the names behind the hashes of the
// hours it builds in blocker_names and caller_names (NamesOf). Days reads each day from the
// build that ends latest among those current (begun more than Margin after each hour it
// covers last changed), and the hours after it from their states (plan.go): a day no late
// finding changed since its build is read from rows alone, today from its prefix and the hour
// under way, a day an imported log changed from its states until it is rebuilt. A finding
// lies in one hour, so a build and the later hours are disjoint, and the counts exact either
// way.
// Clean (clean.go) deletes the builds a newer day build replaced.
package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Margin is how much newer than a day's last change its build must be to be read: the time
// from an insert's view evaluating now() to its rows being visible, with room to spare.
const Margin = time.Minute

// margin is Margin but in tests.
var margin = Margin

// Tables names the tables of one findings table's database.
type Tables struct {
	// HourState holds the states by event-time hour, HourChanges when each hour last changed
	// (migrations 7, 15 and 18 of package store).
	HourState, HourChanges string
	// BlockerNames and CallerNames hold what each blocker and caller hash stands for, with
	// the newest day it was seen (migration 18).
	BlockerNames, CallerNames string
	// Rows holds the rows of the builds recorded in Builds (migration 16): of whole days and
	// of the first hours of a day (prefixes).
	Rows, Builds string
	// Requests indexes the findings' audit ids by blocker, caller and time.
	Requests string
	// Migrations holds the callers' newest calls of the successors of the APIs they used
	// (migration 10; migrated.go).
	Migrations string
	// Retention holds the retention the report service set (migration 12): Days reads no day
	// before the first one it keeps.
	Retention string
}

// TablesFor returns the day tables beside findings ("findings" or "db.findings").
func TablesFor(findings string) Tables {
	prefix := ""
	if i := strings.LastIndexByte(findings, '.'); i >= 0 {
		prefix = findings[:i+1]
	}
	return Tables{
		HourState:    prefix + "finding_hour_states",
		HourChanges:  prefix + "finding_hour_changes",
		BlockerNames: prefix + "blocker_names",
		CallerNames:  prefix + "caller_names",
		Rows:         prefix + "finding_rows",
		Builds:       prefix + "finding_builds",
		Requests:     prefix + "finding_requests",
		Migrations:   prefix + "migration_sightings",
		Retention:    prefix + "retention_settings",
	}
}

// Key is the grouping of a day row: what was used and who used it. Readers group by a
// subset of it and sum findings.
const Key = `rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip`

// DayFormat is how days are passed to and read from the queries (toString of a Date).
const DayFormat = time.DateOnly

// Day returns the UTC day t lies in, as DayFormat.
func Day(t time.Time) string { return t.UTC().Format(DayFormat) }

// Span returns the whole UTC days [from, to) that cover the instants [start, end): readers
// of the day rows count whole days.
func Span(start, end time.Time) (from, to time.Time) {
	from = start.UTC().Truncate(24 * time.Hour)
	to = end.UTC().Truncate(24 * time.Hour)
	if to.Before(end) {
		to = to.AddDate(0, 0, 1)
	}
	return from, to
}

// Filter says which day rows Days gives.
type Filter struct {
	// Cluster whose rows are read; "" reads every cluster's.
	Cluster string
	// From and To bound the UTC days read, [From, To): midnights (see Span).
	From, To time.Time
	// Where, when set, is a condition on the Key columns, with Args for its parameters:
	// applied before the states are merged, it spares the merging of what is not read.
	Where string
	Args  []any
	// Columns, when set, are the columns the reader uses, among Key (rule_id always comes),
	// the hash columns blocker (BlockerHash) and caller (CallerHash), and message, first_seen
	// and last_seen; cluster, day and findings always come. Nothing else is given: a
	// reader's query reads a fraction of the columns. Nil gives every Key and value column.
	Columns []string
	// Migrated says what becomes of the rows of callers that moved to the API's successor
	// after them (migrated.go); the zero value gives every row as it is.
	Migrated Migrated
	// AnyBuild reads the rows of every build of the days read, not only of each day's
	// current build, and a day read from its states with them: for a reader that takes
	// maxima or distinct values (a build's rows are findings stored, a newer build of the day
	// holds them too), never for counts. Days then names no build, so a span of many
	// clusters and days fits in a query (ClickHouse's max_query_size, 256 KiB by default,
	// holds about 12,000 build ids).
	AnyBuild bool
}

// keyColumns are the columns of Key, in order.
var keyColumns = strings.Fields(strings.ReplaceAll(Key, ",", " "))

// The hashes of key columns a reader may ask for in Filter.Columns as blocker and caller:
// grouping by one 64-bit number is several times faster than by the strings on ClickHouse
// 18.16. The build rows and the hour states hold them as columns written at insert
// (migrations 17 and 18 of package store), so reading them reads none of the strings. Two
// values would share a hash with a chance of about one in 10^7 with a million of them.
const (
	// BlockerHash names what was used: the rule and the API.
	BlockerHash = "cityHash64(rule_id, api_group, api_version, resource)"
	// CallerHash names who used it: user, user agent and source IP.
	CallerHash = "cityHash64(username, user_agent, source_ip)"
)

// columns splits f.Columns into key and value columns (every column when unset), and
// refuses names not of the day rows: they are the callers' constants, never input.
func (f Filter) columns() (keys, values []string, err error) {
	if f.Columns == nil {
		return keyColumns, []string{"message", "first_seen", "last_seen"}, nil
	}
	want := map[string]bool{"rule_id": true}
	for _, c := range f.Columns {
		want[c] = true
	}
	for _, c := range append(append([]string{}, keyColumns...), "blocker", "caller") {
		if want[c] {
			keys = append(keys, c)
			delete(want, c)
		}
	}
	for _, c := range []string{"message", "first_seen", "last_seen"} {
		if want[c] {
			values = append(values, c)
			delete(want, c)
		}
	}
	for c := range want {
		return nil, nil, fmt.Errorf("rollup: no day column %q", c)
	}
	return keys, values, nil
}

// merged is the state column c merged; move_key, a column of the build rows, is computed
// from the states' key (the same in every state merged).
var merged = map[string]string{
	"message":    "anyMerge(message)",
	"first_seen": "toUInt32(minMerge(first_seen))",
	"last_seen":  "toUInt32(maxMerge(last_seen))",
	"move_key":   "cityHash64(cluster, any(" + strings.Join(moveColumns, "), any(") + "))",
}

// Days returns a subquery, and its arguments, giving the day rows f asks for: the columns
// cluster, day (Date), the Key columns and hashes of f.Columns, findings (UInt64, distinct
// findings) and of message, first_seen and last_seen (UInt32 Unix seconds) those f.Columns
// names. Each cluster's day comes whole from the rows of its newest build when that build is
// current; else, when one of its prefixes (a build of its first hours) is current, from the
// prefix's rows and the states of the later hours; else from its hours' states (plan). States
// are merged by the hash of their whole key, which keeps their sets small (merging them costs
// about a third of a microsecond per finding on 18.16). A key's day comes in one row, or in
// two when it is read as a prefix and later hours; rows are disjoint in findings either
// way, so sums of findings over any grouping are exact. With f.Migrated the rows meet their
// callers' moves (migrated.go), unless no caller in the span moved: then they come as they are.
func Days(ctx context.Context, db *sql.DB, t Tables, f Filter) (string, []any, error) {
	keys, values, err := f.columns()
	if err != nil {
		return "", nil, err
	}
	given := append(append([]string{"cluster", "day"}, keys...), append(values, "findings")...)
	if f.Migrated != AllRows {
		values = withMoveColumns(values)
	}
	f, p, moved, err := f.prepared(ctx, db, t)
	if err != nil {
		return "", nil, err
	}
	where, args := span(f.Cluster, f.From, f.To)
	if f.Where != "" {
		where += " AND (" + f.Where + ")"
		args = append(args, f.Args...)
	}
	out := strings.Join(append(append([]string{"cluster", "day"}, keys...), append(values, "findings")...), ", ")
	var parts []string
	var all []any
	switch {
	case f.AnyBuild:
		parts = append(parts, builtRows(t.Rows, keys, values, where, nil))
		all = append(all, args...)
	case len(p.builds) > 0 || len(p.dirty) == 0:
		parts = append(parts, builtRows(t.Rows, keys, values, where, p.builds))
		all = append(all, args...)
	}
	if len(p.dirty) > 0 {
		parts = append(parts, mergedStates(t.HourState, "toDate(hour) AS day", keys, values,
			where+` AND hour >= toDateTime(?) AND hour < toDateTime(?) AND has(?, `+clusterDay+`)`))
		all = append(all, args...)
		all = append(all, p.first.Unix(), p.last.AddDate(0, 0, 1).Unix(), p.dirty)
	}
	if len(p.tail) > 0 {
		parts = append(parts, mergedStates(t.HourState, "toDate(hour) AS day", keys, values,
			where+` AND hour >= toDateTime(?) AND hour <= toDateTime(?) AND has(?, `+clusterHour+`)`))
		all = append(all, args...)
		all = append(all, p.firstHour, p.lastHour, p.tail)
	}
	src := `SELECT ` + out + ` FROM (
  ` + strings.Join(parts, "\n  UNION ALL\n  ") + `
)`
	if f.Migrated == AllRows {
		return src, all, nil
	}
	if !moved {
		// No caller moved in the span: every row blocks as it is, and none was fixed.
		return f.Migrated.none(src, given), all, nil
	}
	src, more := f.Migrated.join(src, given, t.Migrations, f.Cluster, f.From)
	return src, append(all, more...), nil
}

// Prepare reads under ctx's snapshot what Days asks of the store before f's rows (the
// retention, f's read plan and, with f.Migrated, whether any caller moved), so that a page
// has them read while it waits for something else, the target of a blockers read: Days then
// finds them read. Without a snapshot it reads nothing, as nothing would be kept.
func Prepare(ctx context.Context, db *sql.DB, t Tables, f Filter) error {
	if _, ok := ctx.Value(snapshotKey{}).(*snapshot); !ok {
		return nil
	}
	_, _, _, err := f.prepared(ctx, db, t)
	return err
}

// prepared is f with its days bounded by the retention, its read plan and, with f.Migrated,
// whether a caller moved in its span (false without): the plan and the moves are read side
// by side, as neither needs the other.
func (f Filter) prepared(ctx context.Context, db *sql.DB, t Tables) (Filter, readPlan, bool, error) {
	kept, _, err := KeptFrom(ctx, db, t)
	if err != nil {
		return f, readPlan{}, false, err
	}
	if f.From.Before(kept) {
		f.From = kept
	}
	if f.To.Before(f.From) {
		f.To = f.From
	}
	var p readPlan
	moved := false
	var g errgroup.Group
	g.Go(func() (err error) {
		p, err = plan(ctx, db, t, f.Cluster, f.From, f.To)
		return err
	})
	if f.Migrated != AllRows {
		g.Go(func() (err error) {
			moved, err = anyMoved(ctx, db, t, f.Cluster, f.From)
			return err
		})
	}
	err = g.Wait()
	return f, p, moved, err
}

// KeptFrom is the first UTC day the retention keeps by the server's clock, and the retention
// in days (the zero time and 0 when it keeps everything): the day rows of earlier days are
// deleted or about to be (TTL merges, store.Store.Expire), so Days reads none of them, and
// every reader agrees at once. The same rule as store.KeptFrom: a retention of d days keeps
// today and the d-1 days before.
func KeptFrom(ctx context.Context, db *sql.DB, t Tables) (time.Time, int, error) {
	type kept struct {
		from time.Time
		days int
	}
	k, err := remember(ctx, "kept "+t.Retention, func() (kept, error) {
		from, days, err := keptFrom(ctx, db, t)
		return kept{from, days}, err
	})
	return k.from, k.days, err
}

func keptFrom(ctx context.Context, db *sql.DB, t Tables) (time.Time, int, error) {
	var days, now uint32
	err := db.QueryRowContext(ctx, `SELECT toUInt32(argMax(days, version)), toUInt32(now()) FROM `+t.Retention+` WHERE kind = 'callers'`).Scan(&days, &now)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("read the retention: %w", err)
	}
	if days == 0 {
		return time.Time{}, 0, nil
	}
	return time.Unix(int64(now), 0).UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-int(days)), int(days), nil
}

// builtRows selects the rows of the builds ids from table (finding_rows) that satisfy where,
// or of every build when ids is nil.
func builtRows(table string, keys, values []string, where string, ids []uint64) string {
	sel := append(append(append([]string{"cluster", "day"}, keys...), values...), "findings")
	if ids == nil {
		return `SELECT ` + strings.Join(sel, ", ") + `
  FROM ` + table + `
  WHERE ` + where
	}
	// Build ids are random numbers of ours, never input: written as literals, they make an IN
	// set (never empty: 0 names no build).
	set := make([]string, 0, len(ids)+1)
	set = append(set, "0")
	for _, id := range ids {
		set = append(set, strconv.FormatUint(id, 10))
	}
	return `SELECT ` + strings.Join(sel, ", ") + `
  FROM ` + table + `
  WHERE ` + where + ` AND build IN (` + strings.Join(set, ", ") + `)`
}

// mergedStates selects from table (finding_hour_states, whose day is the expression day,
// toDate(hour)) the states that satisfy where, merged by cluster, day and key.
func mergedStates(table, day string, keys, values []string, where string) string {
	// Grouped by the whole key's hash, the inner names carry a prefix: an alias named as a
	// column would stand for it in the GROUP BY.
	inner := []string{"cluster", day}
	for _, k := range keys {
		inner = append(inner, "any("+k+") AS s_"+k)
	}
	for _, v := range values {
		inner = append(inner, merged[v]+" AS s_"+v)
	}
	inner = append(inner, "uniqExactMerge(findings) AS s_findings")
	sel := []string{"cluster", "day"}
	for _, c := range append(append(append([]string{}, keys...), values...), "findings") {
		sel = append(sel, "s_"+c+" AS "+c)
	}
	return `SELECT ` + strings.Join(sel, ", ") + ` FROM (
  SELECT ` + strings.Join(inner, ", ") + `
  FROM ` + table + `
  WHERE ` + where + `
  GROUP BY cluster, day, cityHash64(` + Key + `))`
}

// clusterDay names a cluster's day as "YYYY-MM-DD cluster", and clusterHour a cluster's
// hour as "Unix-seconds cluster": the day and the seconds have a fixed length, so no
// cluster name makes two pairs alike.
const (
	clusterDay  = `concat(toString(day), ' ', toString(cluster))`
	clusterHour = `concat(toString(toUInt32(hour)), ' ', toString(cluster))`
)

func pair(day, cluster string) string { return day + " " + cluster }

func hourPair(hour uint32, cluster string) string {
	return strconv.FormatUint(uint64(hour), 10) + " " + cluster
}

// hours is the condition on cluster ("" for every cluster) and the hours of the days
// [from, to) of an hour table, and its arguments.
func hours(cluster string, from, to time.Time) (string, []any) {
	if cluster == "" {
		return `hour >= toDateTime(?) AND hour < toDateTime(?)`, []any{from.Unix(), to.Unix()}
	}
	return `cluster = ? AND hour >= toDateTime(?) AND hour < toDateTime(?)`, []any{cluster, from.Unix(), to.Unix()}
}

// span is the condition on cluster ("" for every cluster) and the days [from, to), and its
// arguments.
func span(cluster string, from, to time.Time) (string, []any) {
	if cluster == "" {
		return `day >= toDate(?) AND day < toDate(?)`, []any{Day(from), Day(to)}
	}
	return `cluster = ? AND day >= toDate(?) AND day < toDate(?)`, []any{cluster, Day(from), Day(to)}
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// each runs q, whose rows are (cluster, day, Unix seconds, 0, build id), calling f for each.
func each(ctx context.Context, db *sql.DB, q string, args []any, f func(cluster, day string, ts uint32, build uint64)) error {
	return scan(ctx, db, q, args, func(c, d string, ts, _ uint32, id uint64) { f(c, d, ts, id) })
}

// scan runs q, whose rows are (cluster, day, two Unix seconds, build id), calling f for each.
func scan(ctx context.Context, db *sql.DB, q string, args []any, f func(cluster, day string, a, b uint32, build uint64)) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c, d string
		var a, b uint32
		var id uint64
		if err := rows.Scan(&c, &d, &a, &b, &id); err != nil {
			return err
		}
		f(c, d, a, b, id)
	}
	return rows.Err()
}
