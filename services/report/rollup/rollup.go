// Package rollup keeps and reads exact per-day counts of findings: one row per cluster, day,
// what was used (rule and API) and who used it (user, user agent, namespace, source IP).
//
// The console, the weekly report and the readiness gate count distinct findings over weeks
// and months. Over raw findings that is a uniqExact over every row of the window; over the
// day rows it is a sum, exact because a finding has one event_time and so lies in one day
// and one row of that day.
//
// The states are kept by event-time hour (migrations 7 and 15 of package store):
// finding_hours_state is filled by a materialized view on every insert with uniqExact states
// of the audit ids, so a finding stored twice counts once, whenever the second copy comes; a
// second view notes in finding_hour_changes when each hour last received findings (a day's
// last change is its hours' newest). Merging states is cheap for a day and dear for months,
// so Compact turns each day that is over into plain counts in finding_days, one build per
// cluster and day recorded in finding_day_builds (by the server's clock when the build
// began). Days reads a day from finding_days when its newest build began more than Margin
// after its newest change, and from its hours' states otherwise (a day an imported log or a
// late redelivery changed since): both give the same exact counts.
//
// Today has no build until it is over, and the cost of merging its states grows with its
// findings until midnight. So Compact also builds the hours of today that are over into a
// prefix of the day (finding_day_prefixes, recorded in finding_day_prefix_builds with the
// hour it ends at). Days reads today from its newest current prefix and the states of the
// later hours: the merging is bounded by an hour's findings. A finding lies in one hour, so
// the prefix and the later hours are disjoint.
package rollup

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Margin is how much newer than a day's last change its build must be to be read: the time
// from an insert's view evaluating now() to its rows being visible, with room to spare.
const Margin = time.Minute

// margin is Margin but in tests.
var margin = Margin

// Tables names the tables of one findings table's database.
type Tables struct {
	// HourState holds the states by event-time hour, HourChanges when each hour last changed
	// (migrations 7 and 15 of package store).
	HourState, HourChanges string
	// Days holds the rows of the day builds recorded in Builds (migration 6); Prefixes and
	// PrefixBuilds the builds of a day's first hours (migration 7).
	Days, Builds, Prefixes, PrefixBuilds string
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
		Days:         prefix + "finding_days",
		Builds:       prefix + "finding_day_builds",
		HourState:    prefix + "finding_hours_state",
		HourChanges:  prefix + "finding_hour_changes",
		Prefixes:     prefix + "finding_day_prefixes",
		PrefixBuilds: prefix + "finding_day_prefix_builds",
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
	// the hashes "blocker" (BlockerHash) and "caller" (CallerHash), and message, first_seen
	// and last_seen; cluster, day and findings always come. Nothing else is given: a
	// reader's query reads a fraction of the columns. Nil gives every Key and value column.
	Columns []string
	// Migrated says what becomes of the rows of callers that moved to the API's successor
	// after them (migrated.go); the zero value gives every row as it is.
	Migrated Migrated
}

// keyColumns are the columns of Key, in order.
var keyColumns = strings.Fields(strings.ReplaceAll(Key, ",", " "))

// Hashes of key columns a reader may ask for by name in Filter.Columns: grouping by one
// 64-bit hash is several times faster than by the strings on ClickHouse 18.16. Two values
// would share a hash with a chance of about one in 10^7 with a million of them.
const (
	// BlockerHash names what was used: the rule and the API.
	BlockerHash = "cityHash64(rule_id, api_group, api_version, resource)"
	// CallerHash names who used it: user, user agent and source IP.
	CallerHash = "cityHash64(username, user_agent, source_ip)"
)

// hashed are the hash columns of Filter.Columns, by name.
var hashed = map[string]string{"blocker": BlockerHash, "caller": CallerHash}

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

// merged is the state column c merged.
var merged = map[string]string{
	"message":    "anyMerge(message)",
	"first_seen": "toUInt32(minMerge(first_seen))",
	"last_seen":  "toUInt32(maxMerge(last_seen))",
}

// Days returns a subquery, and its arguments, giving the day rows f asks for: the columns
// cluster, day (Date), the Key columns and hashes of f.Columns, findings (UInt64, distinct
// findings) and of message, first_seen and last_seen (UInt32 Unix seconds) those f.Columns
// names. Each cluster's day comes whole from the rows of its newest build when that build is
// current; else, when one of its prefixes (the build of its first hours) is current, from
// the prefix's rows and the states of the later hours; else from the day's states. States
// are merged by the hash of their whole key, which keeps their sets small (merging them costs
// about a third of a microsecond per finding on 18.16). A key's day comes in one row, or in
// two when it is read as a prefix and later hours; rows are disjoint in findings either
// way, so sums of findings over any grouping are exact.
func Days(ctx context.Context, db *sql.DB, t Tables, f Filter) (string, []any, error) {
	keys, values, err := f.columns()
	if err != nil {
		return "", nil, err
	}
	given := append(append([]string{"cluster", "day"}, keys...), append(values, "findings")...)
	if f.Migrated != AllRows {
		keys, values = withMoveColumns(keys, values)
	}
	kept, _, err := KeptFrom(ctx, db, t)
	if err != nil {
		return "", nil, err
	}
	if f.From.Before(kept) {
		f.From = kept
	}
	if f.To.Before(f.From) {
		f.To = f.From
	}
	p, err := plan(ctx, db, t, f.Cluster, f.From, f.To)
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
	if len(p.builds) > 0 || len(p.prefixes)+len(p.dirty) == 0 {
		parts = append(parts, builtRows(t.Days, keys, values, where, p.builds))
		all = append(all, args...)
	}
	if len(p.prefixes) > 0 {
		parts = append(parts, builtRows(t.Prefixes, keys, values, where, p.prefixes))
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
	src, more := f.Migrated.join(src, given, t.Migrations, f.Cluster, f.From)
	return src, append(all, more...), nil
}

// KeptFrom is the first UTC day the retention keeps by the server's clock, and the retention
// in days (the zero time and 0 when it keeps everything): the day rows of earlier days are
// deleted or about to be (TTL merges, store.Store.Expire), so Days reads none of them, and
// every reader agrees at once. The same rule as store.KeptFrom: a retention of d days keeps
// today and the d-1 days before.
func KeptFrom(ctx context.Context, db *sql.DB, t Tables) (time.Time, int, error) {
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

// builtRows selects the rows of the builds ids from table (finding_days or
// finding_day_prefixes) that satisfy where.
func builtRows(table string, keys, values []string, where string, ids []uint64) string {
	// Build ids are random numbers of ours, never input: written as literals, they make an IN
	// set (never empty: 0 names no build).
	set := make([]string, 0, len(ids)+1)
	set = append(set, "0")
	for _, id := range ids {
		set = append(set, strconv.FormatUint(id, 10))
	}
	sel := []string{"cluster", "day"}
	for _, k := range keys {
		if h, ok := hashed[k]; ok {
			k = h + " AS " + k
		}
		sel = append(sel, k)
	}
	sel = append(append(sel, values...), "findings")
	return `SELECT ` + strings.Join(sel, ", ") + `
  FROM ` + table + `
  WHERE ` + where + ` AND build IN (` + strings.Join(set, ", ") + `)`
}

// mergedStates selects from table (finding_hours_state, whose day is the expression day,
// toDate(hour)) the states that satisfy where, merged by cluster, day and key.
func mergedStates(table, day string, keys, values []string, where string) string {
	// Grouped by the whole key's hash, the inner names carry a prefix: an alias named as a
	// column would stand for it in the GROUP BY.
	inner := []string{"cluster", day}
	for _, k := range keys {
		if h, ok := hashed[k]; ok {
			// The hash of the group's one value of each column hashed.
			cols := strings.Split(strings.TrimSuffix(strings.TrimPrefix(h, "cityHash64("), ")"), ", ")
			for i, c := range cols {
				cols[i] = "any(" + c + ")"
			}
			inner = append(inner, "cityHash64("+strings.Join(cols, ", ")+") AS s_"+k)
			continue
		}
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

// readPlan says where each cluster's day of a span is read from.
type readPlan struct {
	// builds are the ids of the current day builds, prefixes those of the current prefixes
	// of the days prefixed ("YYYY-MM-DD cluster").
	builds, prefixes []uint64
	prefixed         []string
	// dirty are the days ("YYYY-MM-DD cluster") read from their hours' states, between the
	// days first and last.
	dirty       []string
	first, last time.Time
	// tail are the hours (hourPair) after the prefixes read from their states, between
	// firstHour and lastHour (Unix seconds).
	tail                []string
	firstHour, lastHour uint32
}

// prefix is one build of a cluster's day's first hours, those before until.
type prefix struct {
	until, built uint32
	build        uint64
}

// plan reads which days of cluster ("" for every cluster) in [from, to) have a current
// build (one that began more than the margin after the day last changed), and of the others
// which have a current prefix (one that began more than the margin after each of its hours
// last changed).
func plan(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time) (readPlan, error) {
	cond, hourArgs := hours(cluster, from, to)
	changed := map[string]uint32{}
	err := each(ctx, db, `SELECT toString(cluster), toString(toDate(hour)) AS d, maxMerge(changed), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE `+cond+` GROUP BY cluster, d`, hourArgs, func(c, d string, ts uint32, _ uint64) { changed[pair(d, c)] = ts })
	if err != nil {
		return readPlan{}, fmt.Errorf("read the days' changes: %w", err)
	}
	where, args := span(cluster, from, to)
	var p readPlan
	current := map[string]bool{}
	err = each(ctx, db, `SELECT toString(cluster), toString(day), max(built), toUInt32(0), argMax(build, built) FROM `+t.Builds+`
WHERE `+where+` GROUP BY cluster, day`, args, func(c, d string, built uint32, build uint64) {
		if ch, ok := changed[pair(d, c)]; ok && covers(built, ch) {
			current[pair(d, c)] = true
			p.builds = append(p.builds, build)
		}
	})
	if err != nil {
		return readPlan{}, fmt.Errorf("read the days' builds: %w", err)
	}
	var open []string
	for cd := range changed {
		if !current[cd] {
			open = append(open, cd)
		}
	}
	sort.Strings(open)
	byPrefix, err := readPrefixes(ctx, db, t, cluster, open)
	if err != nil {
		return readPlan{}, err
	}
	for _, cd := range open {
		if tail, ok := byPrefix[cd]; ok {
			p.prefixes = append(p.prefixes, tail.build)
			p.prefixed = append(p.prefixed, cd)
			for _, h := range tail.hours {
				p.tail = append(p.tail, hourPair(h, cd[len(DayFormat)+1:]))
				if p.firstHour == 0 || h < p.firstHour {
					p.firstHour = h
				}
				p.lastHour = max(p.lastHour, h)
			}
			continue
		}
		p.dirty = append(p.dirty, cd)
		d, err := time.Parse(DayFormat, cd[:len(DayFormat)])
		if err != nil {
			return readPlan{}, err
		}
		if p.first.IsZero() || d.Before(p.first) {
			p.first = d
		}
		if d.After(p.last) {
			p.last = d
		}
	}
	sort.Strings(p.tail)
	return p, nil
}

// prefixTail is a day's current prefix, and the hours after it that have findings.
type prefixTail struct {
	build uint64
	hours []uint32
}

// readPrefixes returns, of the days ("YYYY-MM-DD cluster", sorted) of cluster ("" for
// every cluster), those that have a current prefix: the one that ends latest, and the
// hours after it that changed.
func readPrefixes(ctx context.Context, db *sql.DB, t Tables, cluster string, days []string) (map[string]prefixTail, error) {
	if len(days) == 0 {
		return nil, nil
	}
	cond, args := "", []any{}
	if cluster != "" {
		cond, args = "cluster = ? AND ", []any{cluster}
	}
	// Sorted, the days begin with the earliest and end with the latest.
	first, err := time.Parse(DayFormat, days[0][:len(DayFormat)])
	if err != nil {
		return nil, err
	}
	last, err := time.Parse(DayFormat, days[len(days)-1][:len(DayFormat)])
	if err != nil {
		return nil, err
	}
	prefixes := map[string][]prefix{}
	err = scan(ctx, db, `SELECT toString(cluster), toString(day), toUInt32(until), built, build FROM `+t.PrefixBuilds+`
WHERE `+cond+`day >= toDate(?) AND day <= toDate(?) AND has(?, `+clusterDay+`)`,
		append(args, Day(first), Day(last), days), func(c, d string, until, built uint32, build uint64) {
			prefixes[pair(d, c)] = append(prefixes[pair(d, c)], prefix{until: until, built: built, build: build})
		})
	if err != nil || len(prefixes) == 0 {
		return nil, wrap("read the days' prefixes", err)
	}
	hours := map[string]map[uint32]uint32{}
	err = scan(ctx, db, `SELECT toString(cluster), toString(toDate(hour)), toUInt32(hour), maxMerge(changed), toUInt64(0) FROM `+t.HourChanges+`
WHERE `+cond+`hour >= toDateTime(?) AND hour < toDateTime(?) GROUP BY cluster, hour`,
		append(args, first.Unix(), last.AddDate(0, 0, 1).Unix()), func(c, d string, hour, changed uint32, _ uint64) {
			if hours[pair(d, c)] == nil {
				hours[pair(d, c)] = map[uint32]uint32{}
			}
			hours[pair(d, c)][hour] = changed
		})
	if err != nil {
		return nil, wrap("read the hours' changes", err)
	}
	out := map[string]prefixTail{}
	for cd, ps := range prefixes {
		// The latest end first; of two ending alike, the newer.
		sort.Slice(ps, func(i, j int) bool {
			if ps[i].until != ps[j].until {
				return ps[i].until > ps[j].until
			}
			return ps[i].built > ps[j].built
		})
		for _, pr := range ps {
			if tail, ok := pr.current(hours[cd]); ok {
				out[cd] = prefixTail{build: pr.build, hours: tail}
				break
			}
		}
	}
	return out, nil
}

// current reports whether the prefix counts every finding of the hours before its end,
// given when each hour of its day last changed, and returns the hours after it.
func (pr prefix) current(changed map[uint32]uint32) (tail []uint32, ok bool) {
	for h, ch := range changed {
		switch {
		case h >= pr.until:
			tail = append(tail, h)
		case !covers(pr.built, ch):
			return nil, false
		}
	}
	sort.Slice(tail, func(i, j int) bool { return tail[i] < tail[j] })
	return tail, true
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// covers reports whether a build begun at built (Unix seconds, server clock) counts every
// finding of a day last changed at changed.
func covers(built, changed uint32) bool {
	return int64(built) > int64(changed)+int64(margin/time.Second)
}

// clock turns the server's time into the time Compact acts at (tests move it).
var clock = func(server time.Time) time.Time { return server }

// Built counts what a compaction built.
type Built struct {
	// Days are the cluster days built whole, Prefixes the builds of today's first hours.
	Days, Prefixes int
}

// Compact builds, for every cluster, each day that is over (it ended Margin ago by the
// server's clock) and changed since its newest build or never had one, and the prefix of
// the day under way: its hours that are over, when one of them changed since the newest
// prefix of them all. Builds of the same day by two report replicas at once are harmless:
// each is complete, and readers take the newest.
func Compact(ctx context.Context, db *sql.DB, t Tables) (Built, error) {
	var built Built
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
		return built, fmt.Errorf("compact: read the server's clock: %w", err)
	}
	at := clock(time.Unix(int64(now), 0)).Add(-margin).UTC()
	over := Day(at)
	type clusterDay struct{ cluster, day string }
	changed := map[clusterDay]uint32{}
	err := each(ctx, db, `SELECT toString(cluster), toString(toDate(hour)) AS d, maxMerge(changed), toUInt32(0), toUInt64(0) FROM `+t.HourChanges+`
WHERE hour < toDateTime(?) GROUP BY cluster, d`, []any{at.Truncate(24 * time.Hour).Unix()}, func(c, d string, ts uint32, _ uint64) { changed[clusterDay{c, d}] = ts })
	if err != nil {
		return built, fmt.Errorf("compact: read the days' changes: %w", err)
	}
	builds := map[clusterDay]uint32{}
	err = each(ctx, db, `SELECT toString(cluster), toString(day), max(built), toUInt32(0), toUInt64(0) FROM `+t.Builds+`
WHERE day < toDate(?) GROUP BY cluster, day`, []any{over}, func(c, d string, ts uint32, _ uint64) { builds[clusterDay{c, d}] = ts })
	if err != nil {
		return built, fmt.Errorf("compact: read the days' builds: %w", err)
	}
	for cd, c := range changed {
		if b, ok := builds[cd]; ok && covers(b, c) {
			continue
		}
		if err := build(ctx, db, t, cd.cluster, cd.day); err != nil {
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
	err = each(ctx, db, `SELECT toString(cluster), '', max(built), toUInt32(0), toUInt64(0) FROM `+t.PrefixBuilds+`
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
		err := record(ctx, db, t.Prefixes, t.HourState, "toDate(hour) AS day",
			`cluster = ? AND hour >= toDateTime(?) AND hour < toDateTime(?)`, []any{c, start.Unix(), until.Unix()},
			`INSERT INTO `+t.PrefixBuilds+` (cluster, day, until, built, build) SELECT ?, toDate(?), toDateTime(?), toUInt32(?), toUInt64(?)`,
			[]any{c, Day(start), until.Unix()})
		if err != nil {
			return n, fmt.Errorf("compact %s %s until %s: %w", c, Day(start), until.Format("15:04"), err)
		}
		n++
	}
	return n, nil
}

// build turns the states of one cluster's day's hours into finding_days rows under a new
// build id, then records the build: readers take the rows only once the record is there.
func build(ctx context.Context, db *sql.DB, t Tables, cluster, day string) error {
	start, err := time.Parse(DayFormat, day)
	if err != nil {
		return err
	}
	err = record(ctx, db, t.Days, t.HourState, "toDate(hour) AS day", `cluster = ? AND hour >= toDateTime(?) AND hour < toDateTime(?)`,
		[]any{cluster, start.Unix(), start.AddDate(0, 0, 1).Unix()},
		`INSERT INTO `+t.Builds+` (cluster, day, built, build) SELECT ?, toDate(?), toUInt32(?), toUInt64(?)`,
		[]any{cluster, day})
	if err != nil {
		return fmt.Errorf("compact %s %s: %w", cluster, day, err)
	}
	return nil
}

// record writes into the table into (finding_days or finding_day_prefixes), under a new
// build id, the states of from whose rows satisfy where (with whereArgs) merged by cluster,
// day (day: the SELECT's day column) and key; then it runs rec, an INSERT whose arguments
// are recArgs, the server time the build began and its id: readers take the rows only once
// the record is there.
func record(ctx context.Context, db *sql.DB, into, from, day, where string, whereArgs []any, rec string, recArgs []any) error {
	var began uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&began); err != nil {
		return fmt.Errorf("read the server's clock: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := binary.BigEndian.Uint64(b[:]) | 1 // never 0
	rows := `INSERT INTO ` + into + ` (cluster, day, ` + Key + `, message, findings, first_seen, last_seen, build)
SELECT cluster, ` + day + `, ` + Key + `, anyMerge(message), uniqExactMerge(findings),
  toUInt32(minMerge(first_seen)), toUInt32(maxMerge(last_seen)), toUInt64(?)
FROM ` + from + `
WHERE ` + where + `
GROUP BY cluster, day, ` + Key
	if _, err := db.ExecContext(ctx, rows, append([]any{id}, whereArgs...)...); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, rec, append(recArgs, began, id)...); err != nil {
		return fmt.Errorf("record the build: %w", err)
	}
	return nil
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

// Keep is how long the prefixes of a day are kept after the day ended, at least: their
// months that ended longer ago are dropped by Prune. A day under way is read by its newest
// prefix; a day that is over by its day build or its hours' states, which are kept as long
// as the retention.
const Keep = 48 * time.Hour

// Prune drops, through drop (store.Store.DropMonth), the months of the prefix tables that
// ended more than Keep ago by the server's clock, and returns them. The prefix builds go
// first, so that no reader takes a prefix whose rows are gone, and a month dropped in part
// is found again by the next Prune.
func Prune(ctx context.Context, db *sql.DB, t Tables, drop func(ctx context.Context, table string, month uint32) error) ([]uint32, error) {
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
		return nil, fmt.Errorf("prune: read the server's clock: %w", err)
	}
	at := clock(time.Unix(int64(now), 0)).Add(-Keep).UTC()
	keep := uint32(at.Year()*100 + int(at.Month()))
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT toUInt32(toYYYYMM(day)) AS m FROM `+t.PrefixBuilds+`
WHERE toYYYYMM(day) < ?
ORDER BY m`, keep)
	if err != nil {
		return nil, fmt.Errorf("prune: read the months: %w", err)
	}
	var months []uint32
	for rows.Next() {
		var m uint32
		if err := rows.Scan(&m); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("prune: read the months: %w", err)
		}
		months = append(months, m)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("prune: read the months: %w", err)
	}
	for i, m := range months {
		for _, table := range []string{t.PrefixBuilds, t.Prefixes} {
			if err := drop(ctx, table, m); err != nil {
				return months[:i], fmt.Errorf("prune: %w", err)
			}
		}
	}
	return months, nil
}
