package store

// viewV16 is the view finding_days_current as migration 16 created it, over the hour states
// without hash columns that migration 19 retired (migration 19 creates it anew with
// rollup.ViewSQL). Applied migrations are never edited, so its text is kept here as it was.
const viewV16 = `
CREATE VIEW IF NOT EXISTS {{.DB}}.finding_days_current{{.On}} AS
SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM {{.DB}}.finding_rows
  WHERE (cluster, day, build) GLOBAL IN (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM {{.DB}}.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM {{.DB}}.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60)
  UNION ALL
  SELECT cluster, toDate(hour) AS day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM {{.DB}}.finding_hours_state
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM {{.DB}}.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM {{.DB}}.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60))
  GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip
) AS r ANY LEFT JOIN (
  SELECT cluster, api_group, api_version, resource, username, user_agent, toUInt32(max(seen)) AS m_at
  FROM {{.DB}}.migration_sightings
  GROUP BY cluster, api_group, api_version, resource, username, user_agent
) AS m USING (cluster, api_group, api_version, resource, username, user_agent)
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM {{.DB}}.retention_settings WHERE kind = 'callers'))`
