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
// Margin after the day's newest change, else from the day's states merged: both exact, the
// states dearer. (Days also reads today from its newest prefix and later hours; the view
// merges today's day states, which costs more as the day fills but needs no plan.)
const View = "finding_days_current"

// ViewSQL is the statement that creates View: a text/template of package store's migrations
// ({{.DB}}, {{.On}}). On a cluster the tables it names are the Distributed ones, so the build
// ids are matched with GLOBAL IN.
var ViewSQL = `
CREATE VIEW IF NOT EXISTS {{.DB}}.` + View + `{{.On}} AS
SELECT cluster, day, ` + Key + `,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, ` + Key + `,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM {{.DB}}.finding_days
  WHERE (cluster, day, build) GLOBAL IN (` + currentBuilds + `)
  UNION ALL
  SELECT cluster, day, ` + Key + `,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM {{.DB}}.finding_days_state
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (` + currentBuilds + `))
  GROUP BY cluster, day, ` + Key + `
)` + movesJoin("{{.DB}}.migration_sightings", "", "m_at") + `
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM {{.DB}}.retention_settings WHERE kind = 'callers'))`

// currentBuilds selects, per cluster and day, the newest build when it began more than
// Margin after the day's newest change (covers).
var currentBuilds = `
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM {{.DB}}.finding_day_builds
      UNION ALL
      SELECT cluster, day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM {{.DB}}.finding_day_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + ` + strconv.Itoa(int(Margin/time.Second))

// movesKey are the columns that join a day row to its caller's moves.
var movesKey = strings.Join(moveColumns, ", ")
