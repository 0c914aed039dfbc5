package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/kubeapi"
)

// Migrated says what Days makes of the day rows of callers that moved off an API: classify
// sends, per caller (user and user agent) and API replaced, the newest call of its successor
// (migration_sightings). A row whose last call is older than its caller's newest successor
// call is fixed: the caller has moved on since. A row of a later call (the caller went back
// to the old version) blocks again, whole (the day's findings of the caller before the move
// too), and so do the rows after it.
type Migrated uint8

const (
	// AllRows gives every row as it is.
	AllRows Migrated = iota
	// Unmigrated leaves out the fixed rows: what still blocks.
	Unmigrated
	// WithMigratedAt gives every row with a column migrated_at (UInt32 Unix seconds, 0 when the
	// caller never called the successor in the span): a caller has moved when its newest
	// migrated_at is later than its newest last_seen.
	WithMigratedAt
)

// moveColumns are the day columns that name a caller's API and the caller: the move key
// (moveHash) is their hash with the cluster's.
var moveColumns = []string{"api_group", "api_version", "resource", "username", "user_agent"}

// withMoveColumns adds to values the columns the migration join needs: the move key and the
// caller's last call.
func withMoveColumns(values []string) []string {
	for _, c := range []string{"move_key", "last_seen"} {
		if !slices.Contains(values, c) {
			values = append(values, c)
		}
	}
	return values
}

// join wraps src (day rows with the move key) in the join with table (the migration
// sightings of cluster, "" for every cluster's, from the day from on), giving the columns out
// (and migrated_at for WithMigratedAt), and returns the join's arguments, which follow src's.
// The two sides meet on one hash of the cluster and the move columns (moveHash): joined by
// the six strings, a month of one cluster's day rows (200,000) measured 65 ms on ClickHouse
// 18.16 with no sighting at all, by their hash 20 ms. The build rows hold the hash as the
// column move_key (store migration 21); the hour states' rows compute it. Two callers' rows
// would meet wrongly only if their columns hashed alike, as their links (the caller hashes)
// would already.
func (m Migrated) join(src string, out []string, table, cluster string, from time.Time) (string, []any) {
	where, args := sightingsOf(cluster, from)
	sel := strings.Join(out, ", ")
	filter := ""
	switch m {
	case Unmigrated:
		filter = "\nWHERE last_seen >= migrated_at"
	case WithMigratedAt:
		sel += ", migrated_at"
	}
	return `SELECT ` + sel + ` FROM (
` + src + `
) AS r ANY LEFT JOIN (
  SELECT ` + moveHash + ` AS move_key, toUInt32(max(seen)) AS migrated_at
  FROM ` + table + `
  WHERE ` + where + `
  GROUP BY move_key
) AS m USING (move_key)` + filter, args
}

// none gives the columns out of src as join does when no caller moved in the span (no
// sighting to join): every row as it is, migrated_at 0 for WithMigratedAt.
func (m Migrated) none(src string, out []string) string {
	sel := strings.Join(out, ", ")
	if m == WithMigratedAt {
		sel += ", toUInt32(0) AS migrated_at"
	}
	return `SELECT ` + sel + ` FROM (
` + src + `
)`
}

// anyMoved says whether a caller of cluster ("" for every cluster's) called the successor of
// an API it used on the day from or later (table t.Migrations): when none did, Days reads
// the day rows without the join (a month of one cluster's rows, 200,000, joins in 20 ms
// with nothing to join on ClickHouse 18.16) and Moves reads nothing.
func anyMoved(ctx context.Context, db *sql.DB, t Tables, cluster string, from time.Time) (bool, error) {
	return remember(ctx, fmt.Sprintf("moved %s %q %d", t.Migrations, cluster, from.Unix()), func() (bool, error) {
		where, args := sightingsOf(cluster, from)
		var n uint64
		err := Query(ctx, db, "moved callers", `SELECT count() FROM `+t.Migrations+` WHERE `+where, args,
			func(r Row) error { return r.Scan(&n) })
		return n > 0, err
	})
}

// sightingsOf is the condition, and its arguments, on the migration sightings of cluster
// ("" for every cluster's) from the day from on.
func sightingsOf(cluster string, from time.Time) (string, []any) {
	if cluster == "" {
		return `seen >= toDateTime(?)`, []any{from.Unix()}
	}
	return `cluster = ? AND seen >= toDateTime(?)`, []any{cluster, from.Unix()}
}

// moveHash is the hash that joins a day row to its caller's moves in Days.
var moveHash = "cityHash64(cluster, " + movesKey + ")"

// movesJoin joins the rows before it (aliased r) with each caller's newest call of the
// successor of the API it used, from the migration sightings of table that satisfy where
// ("" or "\n  WHERE ..."), as the column as (UInt32 Unix seconds, 0 when none): View's join,
// by the strings (the view's text is a migration's, never edited).
func movesJoin(table, where, as string) string {
	return ` AS r ANY LEFT JOIN (
  SELECT cluster, ` + movesKey + `, toUInt32(max(seen)) AS ` + as + `
  FROM ` + table + where + `
  GROUP BY cluster, ` + movesKey + `
) AS m USING (cluster, ` + movesKey + `)`
}

// Move is a caller that moved off a blocker: its findings of Key's API up to LastSeen are
// fixed by its call of the successor at MigratedAt.
type Move struct {
	RuleID, APIGroup, APIVersion, Resource, RemovedIn string
	Username, UserAgent                               string
	Findings                                          uint64
	LastSeen, MigratedAt                              time.Time
}

// API is "group/version resource" ("v1 resource" for the core group).
func (m Move) API() string { return kubeapi.Name(m.APIGroup, m.APIVersion, m.Resource) }

// Moves lists the callers (user and user agent) of the rows f asks for whose newest call of
// the API's successor is later than their newest row, newest move first, and how many there
// are; at most limit are listed. f.Cluster is required (a caller moves in one cluster);
// f.Migrated and f.Columns are Moves' own.
func Moves(ctx context.Context, db *sql.DB, t Tables, f Filter, limit int) ([]Move, int, error) {
	if f.Cluster == "" {
		return nil, 0, fmt.Errorf("rollup: the moves of every cluster at once: name one")
	}
	if moved, err := anyMoved(ctx, db, t, f.Cluster, f.From); err != nil || !moved {
		return nil, 0, err
	}
	f.Migrated, f.Columns = WithMigratedAt, []string{"api_group", "api_version", "resource", "removed_in", "username", "user_agent", "last_seen"}
	src, args, err := Days(ctx, db, t, f)
	if err != nil {
		return nil, 0, err
	}
	// Only the rows of callers that called a successor can be moves: the strings are grouped
	// for those alone (grouping all of a month's day rows by them measured 145 ms at 200,000
	// rows on ClickHouse 18.16).
	rows, err := db.QueryContext(ctx, `SELECT rule_id, api_group, api_version, resource, removed_in, username, user_agent,
  toUInt64(sum(findings)), toUInt32(max(last_seen)) AS l, toUInt32(max(migrated_at)) AS m
FROM (`+src+`)
WHERE migrated_at > 0
GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent
HAVING m > l
ORDER BY m DESC, username, user_agent, rule_id, api_group, api_version, resource`, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("read the moved callers: %w", err)
	}
	defer rows.Close()
	var out []Move
	n := 0
	for rows.Next() {
		var mv Move
		var last, at uint32
		if err := rows.Scan(&mv.RuleID, &mv.APIGroup, &mv.APIVersion, &mv.Resource, &mv.RemovedIn, &mv.Username, &mv.UserAgent,
			&mv.Findings, &last, &at); err != nil {
			return nil, 0, fmt.Errorf("read the moved callers: %w", err)
		}
		n++
		if len(out) < limit {
			mv.LastSeen, mv.MigratedAt = time.Unix(int64(last), 0).UTC(), time.Unix(int64(at), 0).UTC()
			out = append(out, mv)
		}
	}
	return out, n, rows.Err()
}
