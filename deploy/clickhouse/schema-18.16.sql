-- auditlens schema for ClickHouse 18.16, generated from services/report/store (do not edit).
CREATE DATABASE IF NOT EXISTS auditlens;

-- migration 1: findings
CREATE TABLE IF NOT EXISTS auditlens.findings (
    rule_id        String,
    severity       String,
    cluster        String,
    audit_id       String,
    event_time     DateTime('UTC'),
    verb           String,
    request_uri    String,
    api_group      String,
    api_version    String,
    resource       String,
    subresource    String,
    namespace      String,
    name           String,
    username       String,
    user_agent     String,
    source_ip      String,
    response_code  Int32,
    deprecated_in  String,
    removed_in     String,
    removed_in_key UInt32,
    replacement    String,
    message        String,
    stage          String,
    node           String,
    confidence     String,
    evidence_path  Array(String),
    evidence_value Array(String),
    ingested_at    DateTime('UTC')
) ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(event_time)
ORDER BY (cluster, rule_id, audit_id);

-- migration 2: daily rollups
CREATE TABLE IF NOT EXISTS auditlens.daily_rules (
    day        Date,
    cluster    String,
    rule_id    String,
    severity   String,
    findings   AggregateFunction(uniq, String),
    first_seen AggregateFunction(min, DateTime('UTC')),
    last_seen  AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, severity, day);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.daily_rules_mv TO auditlens.daily_rules AS
SELECT toDate(event_time) AS day, cluster, rule_id, severity,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY day, cluster, rule_id, severity;
CREATE TABLE IF NOT EXISTS auditlens.daily_apis (
    day            Date,
    cluster        String,
    rule_id        String,
    api_group      String,
    api_version    String,
    resource       String,
    deprecated_in  String,
    removed_in     String,
    removed_in_key UInt32,
    replacement    String,
    findings       AggregateFunction(uniq, String),
    callers        AggregateFunction(uniq, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement, day);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.daily_apis_mv TO auditlens.daily_apis AS
SELECT toDate(event_time) AS day, cluster, rule_id, api_group, api_version, resource,
       deprecated_in, removed_in, removed_in_key, replacement,
       uniqState(audit_id) AS findings, uniqState(username) AS callers,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY day, cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement;
CREATE TABLE IF NOT EXISTS auditlens.daily_callers (
    day            Date,
    cluster        String,
    rule_id        String,
    removed_in_key UInt32,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    findings       AggregateFunction(uniq, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip, day);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.daily_callers_mv TO auditlens.daily_callers AS
SELECT toDate(event_time) AS day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip;

-- migration 3: weekly reports
CREATE TABLE IF NOT EXISTS auditlens.weekly_reports (
    cluster        String,
    week_ending    Date,
    target_version String,
    recipients     Array(String),
    sent_at        DateTime('UTC'),
    status         String
) ENGINE = ReplacingMergeTree(sent_at)
ORDER BY (cluster, week_ending, target_version);

-- migration 4: stream minutes
CREATE TABLE IF NOT EXISTS auditlens.stream_minutes (
    cluster  String,
    minute   DateTime('UTC'),
    findings AggregateFunction(uniq, String, String)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(minute)
ORDER BY (cluster, minute);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.stream_minutes_mv TO auditlens.stream_minutes AS
SELECT cluster, toStartOfMinute(event_time) AS minute, uniqState(audit_id, rule_id) AS findings
FROM auditlens.findings
GROUP BY cluster, minute;
INSERT INTO auditlens.stream_minutes (cluster, minute, findings)
SELECT cluster, toStartOfMinute(event_time) AS minute, uniqState(audit_id, rule_id) AS findings
FROM auditlens.findings
GROUP BY cluster, minute;

-- migration 5: event minutes
CREATE TABLE IF NOT EXISTS auditlens.event_minutes (
    cluster String,
    minute  DateTime('UTC'),
    events  UInt64
) ENGINE = ReplacingMergeTree(events)
PARTITION BY toYYYYMM(minute)
ORDER BY (cluster, minute);

-- migration 6: finding days
CREATE TABLE IF NOT EXISTS auditlens.finding_days_state (
    cluster        String,
    day            Date,
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        AggregateFunction(any, String),
    findings       AggregateFunction(uniqExact, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip);
CREATE TABLE IF NOT EXISTS auditlens.finding_day_changes (
    cluster String,
    day     Date,
    changed AggregateFunction(max, UInt32)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day);
CREATE TABLE IF NOT EXISTS auditlens.finding_days (
    cluster        String,
    day            Date,
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        String,
    findings       UInt64,
    first_seen     UInt32,
    last_seen      UInt32,
    build          UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip);
CREATE TABLE IF NOT EXISTS auditlens.finding_day_builds (
    cluster String,
    day     Date,
    built   UInt32,
    build   UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day);
CREATE TABLE IF NOT EXISTS auditlens.finding_requests (
    cluster     String,
    rule_id     String,
    api_group   String,
    api_version String,
    resource    String,
    caller      UInt64,
    event_time  DateTime('UTC'),
    audit_id    String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(event_time)
ORDER BY (cluster, rule_id, api_group, api_version, resource, caller, event_time, audit_id);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_requests_mv TO auditlens.finding_requests AS
SELECT cluster, rule_id, api_group, api_version, resource, cityHash64(username, user_agent, source_ip) AS caller,
       event_time, audit_id
FROM auditlens.findings;
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_days_state_mv TO auditlens.finding_days_state AS
SELECT cluster, toDate(event_time) AS day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip;
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_day_changes_mv TO auditlens.finding_day_changes AS
SELECT cluster, toDate(event_time) AS day, maxState(toUInt32(now())) AS changed
FROM auditlens.findings
GROUP BY cluster, day;
INSERT INTO auditlens.finding_days_state
SELECT cluster, toDate(event_time) AS day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip
SETTINGS max_bytes_before_external_group_by = 2000000000;
INSERT INTO auditlens.finding_day_changes
SELECT cluster, toDate(event_time) AS day, maxState(toUInt32(now())) AS changed
FROM auditlens.findings
GROUP BY cluster, day;
INSERT INTO auditlens.finding_requests
SELECT cluster, rule_id, api_group, api_version, resource, cityHash64(username, user_agent, source_ip) AS caller,
       event_time, audit_id
FROM auditlens.findings;

-- migration 7: finding hours
CREATE TABLE IF NOT EXISTS auditlens.finding_hours_state (
    cluster        String,
    hour           DateTime('UTC'),
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        AggregateFunction(any, String),
    findings       AggregateFunction(uniqExact, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip);
CREATE TABLE IF NOT EXISTS auditlens.finding_hour_changes (
    cluster String,
    hour    DateTime('UTC'),
    changed AggregateFunction(max, UInt32)
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour);
CREATE TABLE IF NOT EXISTS auditlens.finding_day_prefixes (
    cluster        String,
    day            Date,
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        String,
    findings       UInt64,
    first_seen     UInt32,
    last_seen      UInt32,
    build          UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, build);
CREATE TABLE IF NOT EXISTS auditlens.finding_day_prefix_builds (
    cluster String,
    day     Date,
    until   DateTime('UTC'),
    built   UInt32,
    build   UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_hours_state_mv TO auditlens.finding_hours_state AS
SELECT cluster, toStartOfHour(event_time) AS hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip;
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_hour_changes_mv TO auditlens.finding_hour_changes AS
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM auditlens.findings
GROUP BY cluster, hour;
INSERT INTO auditlens.finding_hours_state
SELECT cluster, toStartOfHour(event_time) AS hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
WHERE event_time >= now() - INTERVAL 2 DAY
GROUP BY cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip;
INSERT INTO auditlens.finding_hour_changes
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM auditlens.findings
WHERE event_time >= now() - INTERVAL 2 DAY
GROUP BY cluster, hour;

-- migration 8: control plane sightings
CREATE TABLE IF NOT EXISTS auditlens.control_plane_sightings (
    cluster   String,
    component String,
    version   String,
    seen      DateTime('UTC')
) ENGINE = ReplacingMergeTree(seen)
ORDER BY (cluster, component, version, toDate(seen));

-- migration 9: coverage sightings
CREATE TABLE IF NOT EXISTS auditlens.coverage_sightings (
    cluster String,
    input   String,
    level   String,
    writes  String,
    seen    DateTime('UTC')
) ENGINE = ReplacingMergeTree(seen)
ORDER BY (cluster, input, level, writes, toDate(seen));

-- migration 10: migration sightings
CREATE TABLE IF NOT EXISTS auditlens.migration_sightings (
    cluster     String,
    api_group   String,
    api_version String,
    resource    String,
    username    String,
    user_agent  String,
    seen        DateTime('UTC')
) ENGINE = ReplacingMergeTree(seen)
PARTITION BY toYYYYMM(seen)
ORDER BY (cluster, api_group, api_version, resource, username, user_agent, toDate(seen));

-- migration 11: review sightings
CREATE TABLE IF NOT EXISTS auditlens.review_sightings (
    cluster String,
    through String,
    seen    DateTime('UTC')
) ENGINE = ReplacingMergeTree(seen)
ORDER BY (cluster, through, toDate(seen));

-- migration 12: retention settings
CREATE TABLE IF NOT EXISTS auditlens.retention_settings (
    kind    String,
    days    UInt32,
    set_at  DateTime('UTC'),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY kind;

-- migration 13: one set of numbers
DROP TABLE IF EXISTS auditlens.daily_rules_mv;
DROP TABLE IF EXISTS auditlens.daily_apis_mv;
DROP TABLE IF EXISTS auditlens.daily_callers_mv;
DROP TABLE IF EXISTS auditlens.daily_rules;
DROP TABLE IF EXISTS auditlens.daily_apis;
DROP TABLE IF EXISTS auditlens.daily_callers;
CREATE VIEW IF NOT EXISTS auditlens.finding_days_current AS
SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM auditlens.finding_days
  WHERE (cluster, day, build) GLOBAL IN (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_day_builds
      UNION ALL
      SELECT cluster, day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_day_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60)
  UNION ALL
  SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM auditlens.finding_days_state
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_day_builds
      UNION ALL
      SELECT cluster, day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_day_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60))
  GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip
) AS r ANY LEFT JOIN (
  SELECT cluster, api_group, api_version, resource, username, user_agent, toUInt32(max(seen)) AS m_at
  FROM auditlens.migration_sightings
  GROUP BY cluster, api_group, api_version, resource, username, user_agent
) AS m USING (cluster, api_group, api_version, resource, username, user_agent)
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM auditlens.retention_settings WHERE kind = 'callers'));

-- migration 14: leases
CREATE TABLE IF NOT EXISTS auditlens.leases (
    lease   String,
    holder  String,
    until   DateTime('UTC'),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY lease;

-- migration 15: hour states only
INSERT INTO auditlens.finding_hours_state (cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip, message, findings, first_seen, last_seen)
SELECT cluster, toStartOfHour(event_time) AS hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip
SETTINGS max_bytes_before_external_group_by = 2000000000;
INSERT INTO auditlens.finding_hour_changes
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM auditlens.findings
WHERE (cluster, hour) GLOBAL NOT IN (SELECT cluster, hour FROM auditlens.finding_hour_changes)
GROUP BY cluster, hour;
DROP TABLE IF EXISTS auditlens.finding_days_current;
DROP TABLE IF EXISTS auditlens.finding_days_state_mv;
DROP TABLE IF EXISTS auditlens.finding_day_changes_mv;
DROP TABLE IF EXISTS auditlens.finding_days_state;
DROP TABLE IF EXISTS auditlens.finding_day_changes;

-- migration 16: one builds table
CREATE TABLE IF NOT EXISTS auditlens.finding_rows (
    cluster        String,
    day            Date,
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        String,
    findings       UInt64,
    first_seen     UInt32,
    last_seen      UInt32,
    build          UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, build, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip);
CREATE TABLE IF NOT EXISTS auditlens.finding_builds (
    cluster String,
    day     Date,
    until   DateTime('UTC'),
    built   UInt32,
    build   UInt64
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day);
DROP TABLE IF EXISTS auditlens.finding_days_current;
DROP TABLE IF EXISTS auditlens.finding_day_builds;
DROP TABLE IF EXISTS auditlens.finding_day_prefix_builds;
DROP TABLE IF EXISTS auditlens.finding_days;
DROP TABLE IF EXISTS auditlens.finding_day_prefixes;
CREATE VIEW IF NOT EXISTS auditlens.finding_days_current AS
SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM auditlens.finding_rows
  WHERE (cluster, day, build) GLOBAL IN (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60)
  UNION ALL
  SELECT cluster, toDate(hour) AS day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM auditlens.finding_hours_state
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60))
  GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip
) AS r ANY LEFT JOIN (
  SELECT cluster, api_group, api_version, resource, username, user_agent, toUInt32(max(seen)) AS m_at
  FROM auditlens.migration_sightings
  GROUP BY cluster, api_group, api_version, resource, username, user_agent
) AS m USING (cluster, api_group, api_version, resource, username, user_agent)
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM auditlens.retention_settings WHERE kind = 'callers'));

-- migration 17: hashes at insert
ALTER TABLE auditlens.finding_rows ADD COLUMN blocker UInt64 DEFAULT cityHash64(rule_id, api_group, api_version, resource);
ALTER TABLE auditlens.finding_rows ADD COLUMN caller UInt64 DEFAULT cityHash64(username, user_agent, source_ip);

-- migration 18: hour states with hashes
CREATE TABLE IF NOT EXISTS auditlens.finding_hour_states (
    cluster        String,
    hour           DateTime('UTC'),
    blocker        UInt64,
    caller         UInt64,
    rule_id        String,
    removed_in_key UInt32,
    api_group      String,
    api_version    String,
    resource       String,
    removed_in     String,
    replacement    String,
    username       String,
    user_agent     String,
    namespace      String,
    source_ip      String,
    message        AggregateFunction(any, String),
    findings       AggregateFunction(uniqExact, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour, blocker, caller, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip);
CREATE TABLE IF NOT EXISTS auditlens.blocker_names (
    blocker     UInt64,
    rule_id     String,
    api_group   String,
    api_version String,
    resource    String,
    removed_in  String,
    replacement String,
    seen        Date
) ENGINE = ReplacingMergeTree(seen)
ORDER BY blocker;
CREATE TABLE IF NOT EXISTS auditlens.caller_names (
    caller      UInt64,
    username    String,
    user_agent  String,
    source_ip   String,
    seen        Date
) ENGINE = ReplacingMergeTree(seen)
ORDER BY caller;
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_hour_states_mv TO auditlens.finding_hour_states AS
SELECT cluster, toStartOfHour(event_time) AS hour, cityHash64(rule_id, api_group, api_version, resource) AS blocker, cityHash64(username, user_agent, source_ip) AS caller, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip;
INSERT INTO auditlens.finding_hour_states (cluster, hour, blocker, caller, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip, message, findings, first_seen, last_seen)
SELECT cluster, hour, cityHash64(rule_id, api_group, api_version, resource) AS blocker, cityHash64(username, user_agent, source_ip) AS caller, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip, message, findings, first_seen, last_seen
FROM auditlens.finding_hours_state;
INSERT INTO auditlens.blocker_names (blocker, rule_id, api_group, api_version, resource, removed_in, replacement, seen)
SELECT blocker, any(rule_id), any(api_group), any(api_version), any(resource), argMax(removed_in, hour), argMax(replacement, hour),
       toDate(max(hour))
FROM auditlens.finding_hour_states
GROUP BY blocker;
INSERT INTO auditlens.caller_names (caller, username, user_agent, source_ip, seen)
SELECT caller, any(username), any(user_agent), any(source_ip), toDate(max(hour))
FROM auditlens.finding_hour_states
GROUP BY caller;

-- migration 19: one table of hour states
DROP TABLE IF EXISTS auditlens.finding_days_current;
DROP TABLE IF EXISTS auditlens.finding_hours_state_mv;
DROP TABLE IF EXISTS auditlens.finding_hours_state;
CREATE VIEW IF NOT EXISTS auditlens.finding_days_current AS
SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
       msg AS message, n AS findings, toDateTime(fs, 'UTC') AS first_seen, toDateTime(ls, 'UTC') AS last_seen,
       toDateTime(m_at, 'UTC') AS migrated_at, toUInt8(m_at > ls) AS fixed
FROM (
  SELECT cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         message AS msg, findings AS n, first_seen AS fs, last_seen AS ls
  FROM auditlens.finding_rows
  WHERE (cluster, day, build) GLOBAL IN (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60)
  UNION ALL
  SELECT cluster, toDate(hour) AS day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip,
         anyMerge(message) AS msg, uniqExactMerge(findings) AS n,
         toUInt32(minMerge(first_seen)) AS fs, toUInt32(maxMerge(last_seen)) AS ls
  FROM auditlens.finding_hour_states
  WHERE (cluster, day) GLOBAL NOT IN (SELECT cluster, day FROM (
    SELECT cluster, day, argMax(build, built) AS b FROM (
      SELECT cluster, day, build, built, toUInt32(0) AS changed FROM auditlens.finding_builds WHERE toDate(until) > day
      UNION ALL
      SELECT cluster, toDate(hour) AS day, toUInt64(0), toUInt32(0), maxMerge(changed) FROM auditlens.finding_hour_changes GROUP BY cluster, day)
    GROUP BY cluster, day
    HAVING max(built) > max(changed) + 60))
  GROUP BY cluster, day, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
  username, user_agent, namespace, source_ip
) AS r ANY LEFT JOIN (
  SELECT cluster, api_group, api_version, resource, username, user_agent, toUInt32(max(seen)) AS m_at
  FROM auditlens.migration_sightings
  GROUP BY cluster, api_group, api_version, resource, username, user_agent
) AS m USING (cluster, api_group, api_version, resource, username, user_agent)
WHERE day >= (SELECT if(d = 0, toDate('1970-01-01'), toDate(toDate(toDateTime(now(), 'UTC')) + 1 - d)) FROM (
  SELECT toUInt32(argMax(days, version)) AS d FROM auditlens.retention_settings WHERE kind = 'callers'));

-- migration 20: request time in a finding's identity
ALTER TABLE auditlens.findings ADD COLUMN request_received UInt32, MODIFY ORDER BY (cluster, rule_id, audit_id, request_received);
CREATE MATERIALIZED VIEW IF NOT EXISTS auditlens.finding_hour_states_by_request_mv TO auditlens.finding_hour_states AS
SELECT cluster, toStartOfHour(event_time) AS hour, cityHash64(rule_id, api_group, api_version, resource) AS blocker, cityHash64(username, user_agent, source_ip) AS caller, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message,
       uniqExactState(if(request_received = 0, audit_id, concat(audit_id, '@', toString(request_received)))) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM auditlens.findings
GROUP BY cluster, hour, rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip;
DROP TABLE IF EXISTS auditlens.finding_hour_states_mv;

-- migration 21: move key at build
ALTER TABLE auditlens.finding_rows ADD COLUMN move_key UInt64 DEFAULT cityHash64(cluster, api_group, api_version, resource, username, user_agent);
