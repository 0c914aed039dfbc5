package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// BenchmarkWeeklyAggregation10M times the weekly-style aggregation (blockers of one week
// with their callers: distinct findings, first and last seen) over 10 million findings on a
// ClickHouse 18.16 server, four ways in the same run: on the raw table counting the identity
// with uniqExact (the baseline), on the raw table with FINAL, on the exact day rows of the view
// finding_days_current (the days compacted first, as the service does), and on the same rows
// as the dashboards read them (rollup.CurrentSQL, the cluster and week inside). The findings
// are generated server-side (INSERT ... SELECT FROM numbers), over 8 weeks, 40
// APIs, ~7,400 callers, every 20th finding inserted twice. Run with
//
//	go test -run '^$' -bench WeeklyAggregation10M -benchtime 5x ./store/
func BenchmarkWeeklyAggregation10M(b *testing.B) {
	const n = 10_000_000
	_, st := chtest.ServerStore(b)
	ctx := context.Background()
	start := time.Date(2026, 9, 28, 0, 0, 0, 0, time.UTC) // a Monday; 8 weeks to 2026-11-22
	t0 := time.Now()
	gen := `INSERT INTO findings (rule_id, severity, cluster, audit_id, event_time, verb, api_group, api_version,
  resource, namespace, username, user_agent, source_ip, removed_in, removed_in_key, message, ingested_at)
SELECT if(api % 10 = 0, 'psp', 'removed-api'), 'critical', if(number % 10 = 0, 'staging', 'prod'),
  concat('audit-', toString(number % ?)),
  toDateTime(? + (number * 48271) % (56 * 86400)), 'list',
  concat('group', toString(api)), 'v1beta1', concat('resource', toString(api)),
  concat('ns', toString(number % 200)),
  concat('system:serviceaccount:ns', toString(number % 200), ':sa', toString(number % 37)),
  concat('client-go/v0.', toString(number % 30), ' (linux/amd64)'),
  concat('10.0.', toString(number % 250), '.1'),
  concat('1.', toString(16 + api % 17)), 1016 + api % 17, 'migrate', now()
FROM (SELECT number, number % 40 AS api FROM (SELECT number + ? AS number FROM numbers(?)))`
	// Every 20th audit id repeats (number % (n*19/20)): redeliveries that must count once.
	// A million at a time: one insert of all ten took past the driver's read timeout on a
	// loaded machine ("driver: bad connection").
	const chunk = 1_000_000
	for from := 0; from < n; from += chunk {
		if _, err := st.DB().ExecContext(ctx, gen, n*19/20, start.Unix(), from, chunk); err != nil {
			b.Fatal(err)
		}
	}
	var rows, distinct uint64
	if err := st.DB().QueryRowContext(ctx, "SELECT count(), uniqExact(cluster, rule_id, audit_id) FROM findings").Scan(&rows, &distinct); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d rows (%d distinct findings) in %v", rows, distinct, time.Since(t0).Round(time.Millisecond))
	// The days compacted, as the report service keeps them: the view reads their builds.
	chtest.CompactDays(b, st.DB())
	weekFrom, weekTo := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 22, 23, 59, 59, 0, time.UTC)
	target := store.VersionKey("1.25")
	week := fmt.Sprintf("day >= toDate('%s') AND day <= toDate('%s')", weekFrom.Format(time.DateOnly), weekTo.Format(time.DateOnly))
	args := []any{"prod", weekFrom, weekTo, target}
	queries := []struct {
		name, sql string
		args      []any
	}{
		{"raw-uniqExact", `SELECT rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace,
  uniqExact(audit_id) AS findings, min(event_time) AS first_seen, max(event_time) AS last_seen
FROM findings
WHERE cluster = ? AND event_time >= ? AND event_time <= ? AND removed_in_key BETWEEN 1000 AND ?
GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace
ORDER BY findings DESC LIMIT 5000`, args},
		{"raw-FINAL", `SELECT rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace,
  count() AS findings, min(event_time) AS first_seen, max(event_time) AS last_seen
FROM findings FINAL
WHERE cluster = ? AND event_time >= ? AND event_time <= ? AND removed_in_key BETWEEN 1000 AND ?
GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace
ORDER BY findings DESC LIMIT 5000`, args},
		{"view", `SELECT rule_id, username, user_agent, namespace,
  toUInt64(sum(findings)) AS n, min(first_seen) AS f, max(last_seen) AS l
FROM finding_days_current
WHERE cluster = ? AND day >= toDate(?) AND day <= toDate(?) AND removed_in_key BETWEEN 1000 AND ?
GROUP BY rule_id, username, user_agent, namespace
ORDER BY n DESC LIMIT 5000`, args},
		{"panel", `SELECT rule_id, username, user_agent, namespace,
  toUInt64(sum(findings)) AS n, min(first_seen) AS f, max(last_seen) AS l
FROM (` + rollup.CurrentSQL("", "'prod'", week) + `)
WHERE removed_in_key BETWEEN 1000 AND ?
GROUP BY rule_id, username, user_agent, namespace
ORDER BY n DESC LIMIT 5000`, []any{target}},
	}
	totals := map[string]uint64{}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			var total uint64
			for b.Loop() {
				rows, err := st.DB().QueryContext(ctx, q.sql, q.args...)
				if err != nil {
					b.Fatal(err)
				}
				total = 0
				for rows.Next() {
					var rule, g, v, r, rem, u, ua, ns string
					var c uint64
					var first, last time.Time
					dest := []any{&rule, &g, &v, &r, &rem, &u, &ua, &ns, &c, &first, &last}
					if q.name == "view" || q.name == "panel" {
						dest = []any{&rule, &u, &ua, &ns, &c, &first, &last}
					}
					if err := rows.Scan(dest...); err != nil {
						b.Fatal(err)
					}
					total += c
				}
				if err := rows.Close(); err != nil {
					b.Fatal(err)
				}
			}
			totals[q.name] = total
			b.ReportMetric(float64(n), "findings")
		})
	}
	b.Logf("findings counted in the week's top 5000 groups: %v", totals)
	if totals["panel"] != totals["view"] {
		b.Errorf("the dashboards' rows count %d findings, the view %d", totals["panel"], totals["view"])
	}
}
