package rollup

import (
	"strconv"
	"strings"
	"time"
)

// View is the view that gives every reader outside this package (Grafana's dashboards, an
// analyst's SQL) the day rows Days gives: finding_days_current, one row per cluster, day and
// Key with exact counts. Its columns are cluster, day, the Key columns, message, findings
// (UInt64, distinct findings), first_seen and last_seen (DateTime('UTC')), migrated_at
// (DateTime('UTC'): the caller's newest call of the API's successor, 1970 when none) and fixed
// (UInt8: 1 when migrated_at is after last_seen, the row the caller moved off; Days with
// Unmigrated leaves those rows out). Days before the first one the callers' retention keeps
// are left out, as Days does.
//
// A cluster's day comes from the rows of its newest build when that build began more than
// Margin after the day's newest change, else from its hours' states merged: both exact, the
// states dearer. (Days also reads today from its newest prefix and later hours; the view
// merges today's hour states, which costs more as the day fills but needs no plan.)
const View = "finding_days_current"

// ViewSQL is the statement that creates View: a text/template of package store's migrations
// ({{.DB}}, {{.On}}). On a cluster the tables it names are the Distributed ones, so the build
// ids are matched with GLOBAL IN.
var ViewSQL = `
CREATE VIEW IF NOT EXISTS {{.DB}}.` + View + `{{.On}} AS` + CurrentSQL("{{.DB}}.", "", "")

// CurrentSQL is View's SELECT over the tables prefix names ("" or "db."), with the
// conditions on cluster and day inside, where they cut what is read: cluster is an SQL value
// (a literal, a Grafana variable such as '${cluster}'), days a condition on the column day;
// either may be empty. ClickHouse 18.16 applies a query's WHERE after a view's whole SELECT,
// so the dashboards read this, not View: a week of one cluster reads that week's rows, not
// every day's. With both empty it is View's SELECT.
func CurrentSQL(prefix, cluster, days string) string {
	var conds []string
	if cluster != "" {
		conds = append(conds, "cluster = "+cluster)
	}
	if days != "" {
		conds = append(conds, days)
	}
	and, moves := "", ""
	if len(conds) > 0 {
		and = " AND " + strings.Join(conds, " AND ")
	}
	if cluster != "" {
		moves = " WHERE cluster = " + cluster
	}
	builds := currentBuilds(prefix, and)
	return `
SELECT cluster, day, ` + Key + `,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, ` + Key + `,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM ` + prefix + `finding_rows
  WHERE (cluster, day, build) GLOBAL IN (` + builds + `)` + and + `
  UNION ALL
  SELECT cluster, toDate(hour) AS day, ` + Key + `,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM ` + prefix + `finding_hour_states
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (` + builds + `))` + and + `
  GROUP BY cluster, day, ` + Key + `
)` + movesJoin(prefix+"migration_sightings", moves, "m_at") + `
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM ` + prefix + `retention_settings WHERE kind = 'callers'))`
}

// currentBuilds selects, per cluster and day (of those and, " AND ..." or "", keeps), the
// newest whole build (one that ends at the next midnight) when it began more than Margin after
// the day's newest change (covers).
func currentBuilds(prefix, and string) string {
	where := ""
	if and != "" {
		where = " WHERE" + strings.TrimPrefix(and, " AND")
	}
	return `
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM ` + prefix + `finding_builds WHERE ` + Whole + and + `
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM ` + prefix + `finding_hour_changes` + where + ` GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + ` + strconv.Itoa(int(Margin/time.Second))
}

// movesKey are the columns that join a day row to its caller's moves.
var movesKey = strings.Join(moveColumns, ", ")
