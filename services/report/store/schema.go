package store

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"

	"github.com/auditlens/auditlens/services/report/rollup"
)

// Migration is one versioned step of the schema. Its statements are idempotent (IF NOT
// EXISTS), so a step interrupted half-way, or run by two replicas at once, is safe to repeat.
type Migration struct {
	Version int
	Name    string
	// SQL holds the statements as text/template, rendered with schemaVars; a statement that
	// renders empty is skipped. A table is created as {{.Local "name"}}{{.On}} with
	// ENGINE = {{.Engine "name" "XMergeTree(...)"}}, followed by {{.Distributed "name" KEY}}:
	// one table on a single server; on a cluster a replicated table on each shard and the
	// Distributed table of the name users query over them.
	// Every table a step creates is listed in Tables with what it holds (the retention).
	SQL []string
}

// schemaVars fill the statement templates for one engine.
type schemaVars struct {
	DB string
	// LC is the type of low-cardinality strings: LowCardinality(String) on modern servers,
	// String on 18.16, where LowCardinality is experimental.
	LC string
	// Cluster is the ClickHouse cluster (remote_servers) the schema spans; empty on a
	// single server.
	Cluster string
	// Modern is true from ClickHouse 20.3 on.
	Modern bool
}

func varsFor(database string, v Version, cluster string) schemaVars {
	lc := "String"
	if v.Modern() {
		lc = "LowCardinality(String)"
	}
	return schemaVars{DB: database, LC: lc, Cluster: cluster, Modern: v.Modern()}
}

// Local is the name of the table that stores name's rows: name on a single server,
// name_local on a cluster (name is then its Distributed table).
func (v schemaVars) Local(name string) string { return localName(name, v.Cluster) }

// On is the ON CLUSTER clause of DDL on a cluster, else empty.
func (v schemaVars) On() string { return onCluster(v.Cluster) }

// Engine is engine (e.g. "ReplacingMergeTree(ingested_at)") on a single server, and its
// Replicated form on a cluster, replicated per shard through ZooKeeper under
// /clickhouse/tables/{shard}/DB/LOCAL with the server's {shard} and {replica} macros.
func (v schemaVars) Engine(table, engine string) (string, error) {
	if v.Cluster == "" {
		return engine, nil
	}
	return replicated(engine, fmt.Sprintf("/clickhouse/tables/{shard}/%s/%s", v.DB, v.Local(table)), "{replica}")
}

// EngineEverywhere is engine on a single server, and on a cluster its Replicated form with
// one replica on every server of the cluster (under /clickhouse/tables/all/DB/TABLE): for
// small tables that a server reads locally, so that it reads what it wrote itself.
func (v schemaVars) EngineEverywhere(table, engine string) (string, error) {
	if v.Cluster == "" {
		return engine, nil
	}
	return replicated(engine, fmt.Sprintf("/clickhouse/tables/all/%s/%s", v.DB, table), "{shard}-{replica}")
}

// replicated is engine ("Name(args)") as ReplicatedName('path', 'replica', args).
func replicated(engine, path, replica string) (string, error) {
	name, args, ok := strings.Cut(engine, "(")
	if !ok || !strings.HasSuffix(args, ")") {
		return "", fmt.Errorf("engine %q: want Name(args)", engine)
	}
	args = strings.TrimSuffix(args, ")")
	zk := fmt.Sprintf("'%s', '%s'", path, replica)
	if args != "" {
		zk += ", " + args
	}
	return "Replicated" + name + "(" + zk + ")", nil
}

func localName(name, cluster string) string {
	if cluster == "" {
		return name
	}
	return name + "_local"
}

func onCluster(cluster string) string {
	if cluster == "" {
		return ""
	}
	return " ON CLUSTER " + cluster
}

// Distributed is, on a cluster, the statement that creates table as a Distributed table
// over its local tables, sending each inserted row to the shard that shardingKey picks; on
// a single server it is empty (the table is the local one).
func (v schemaVars) Distributed(table, shardingKey string) string {
	if v.Cluster == "" {
		return ""
	}
	return fmt.Sprintf("\nCREATE TABLE IF NOT EXISTS %s.%s%s AS %s.%s\nENGINE = Distributed(%s, %s, %s, %s)",
		v.DB, table, v.On(), v.DB, v.Local(table), v.Cluster, v.DB, v.Local(table), shardingKey)
}

func (m Migration) render(vars schemaVars) ([]string, error) {
	out := make([]string, 0, len(m.SQL))
	for _, s := range m.SQL {
		t, err := template.New("").Option("missingkey=error").Parse(s)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, vars); err != nil {
			return nil, err
		}
		if strings.TrimSpace(b.String()) != "" {
			out = append(out, b.String())
		}
	}
	return out, nil
}

// The columns of the finding days (package rollup) that migrations 6 and 7 repeat: the key of
// a day's row, the states of its values (a materialized view's SELECT gives them from the
// findings) or their counts, and the key in a sorting key and a GROUP BY.
const (
	dayKeyColumns = `    rule_id        {{.LC}},
    removed_in_key UInt32,
    api_group      {{.LC}},
    api_version    {{.LC}},
    resource       {{.LC}},
    removed_in     {{.LC}},
    replacement    {{.LC}},
    username       String,
    user_agent     String,
    namespace      {{.LC}},
    source_ip      String,
`
	dayStateColumns = `    message        AggregateFunction(any, String),
    findings       AggregateFunction(uniqExact, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
`
	dayCountColumns = `    message        String,
    findings       UInt64,
    first_seen     UInt32,
    last_seen      UInt32,
    build          UInt64
`
	dayKeyOrder    = `rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement, username, user_agent, namespace, source_ip`
	dayStateSelect = `rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message, uniqExactState(audit_id) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings`
	dayKeyGroup = `rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
         username, user_agent, namespace, source_ip`
)

// Migrations is the schema history, oldest first. Append new steps; never edit applied ones.
var Migrations = []Migration{
	{Version: 1, Name: "findings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "findings"}}{{.On}} (
    rule_id        {{.LC}},
    severity       {{.LC}},
    cluster        {{.LC}},
    audit_id       String,
    event_time     DateTime('UTC'),
    verb           {{.LC}},
    request_uri    String,
    api_group      {{.LC}},
    api_version    {{.LC}},
    resource       {{.LC}},
    subresource    {{.LC}},
    namespace      {{.LC}},
    name           String,
    username       String,
    user_agent     String,
    source_ip      String,
    response_code  Int32,
    deprecated_in  {{.LC}},
    removed_in     {{.LC}},
    removed_in_key UInt32,
    replacement    {{.LC}},
    message        String,
    stage          {{.LC}},
    node           {{.LC}},
    confidence     {{.LC}},
    evidence_path  Array(String),
    evidence_value Array(String),
    ingested_at    DateTime('UTC')
) ENGINE = {{.Engine "findings" "ReplacingMergeTree(ingested_at)"}}
PARTITION BY toYYYYMM(event_time)
ORDER BY (cluster, rule_id, audit_id)`,
		// One finding identity (cluster, audit_id, rule_id) always goes to the same shard, so
		// each shard's replacing merges and FINAL see every copy of it.
		`{{.Distributed "findings" "cityHash64(cluster, audit_id)"}}`}},
	// On a cluster the views read the inserts into the Distributed findings table (on the
	// server that takes them) and write through the Distributed rollup tables: every attempt
	// of a retried insert reaches them. Views on the shards' findings_local would be skipped
	// for a block that the replicated table de-duplicates, so a crash between storing a
	// block and its rollup rows would lose them; rollup states count a finding once however
	// often it comes.
	{Version: 2, Name: "daily rollups", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "daily_rules"}}{{.On}} (
    day        Date,
    cluster    {{.LC}},
    rule_id    {{.LC}},
    severity   {{.LC}},
    findings   AggregateFunction(uniq, String),
    first_seen AggregateFunction(min, DateTime('UTC')),
    last_seen  AggregateFunction(max, DateTime('UTC'))
) ENGINE = {{.Engine "daily_rules" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, severity, day)`,
		`{{.Distributed "daily_rules" "cityHash64(cluster, rule_id)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_rules_mv{{.On}} TO {{.DB}}.daily_rules AS
SELECT toDate(event_time) AS day, cluster, rule_id, severity,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, severity`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "daily_apis"}}{{.On}} (
    day            Date,
    cluster        {{.LC}},
    rule_id        {{.LC}},
    api_group      {{.LC}},
    api_version    {{.LC}},
    resource       {{.LC}},
    deprecated_in  {{.LC}},
    removed_in     {{.LC}},
    removed_in_key UInt32,
    replacement    {{.LC}},
    findings       AggregateFunction(uniq, String),
    callers        AggregateFunction(uniq, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = {{.Engine "daily_apis" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement, day)`,
		`{{.Distributed "daily_apis" "cityHash64(cluster, rule_id)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_apis_mv{{.On}} TO {{.DB}}.daily_apis AS
SELECT toDate(event_time) AS day, cluster, rule_id, api_group, api_version, resource,
       deprecated_in, removed_in, removed_in_key, replacement,
       uniqState(audit_id) AS findings, uniqState(username) AS callers,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "daily_callers"}}{{.On}} (
    day            Date,
    cluster        {{.LC}},
    rule_id        {{.LC}},
    removed_in_key UInt32,
    username       String,
    user_agent     String,
    namespace      {{.LC}},
    source_ip      String,
    findings       AggregateFunction(uniq, String),
    first_seen     AggregateFunction(min, DateTime('UTC')),
    last_seen      AggregateFunction(max, DateTime('UTC'))
) ENGINE = {{.Engine "daily_callers" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip, day)`,
		`{{.Distributed "daily_callers" "cityHash64(cluster, rule_id)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_callers_mv{{.On}} TO {{.DB}}.daily_callers AS
SELECT toDate(event_time) AS day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip`}},
	// The ledger of sent weeks: a few rows a week, on every server of a cluster, so that
	// the report that records "sending" reads it back from the server it wrote to.
	{Version: 3, Name: "weekly reports", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.weekly_reports{{.On}} (
    cluster        String,
    week_ending    Date,
    target_version String,
    recipients     Array(String),
    sent_at        DateTime('UTC'),
    status         String
) ENGINE = {{.EngineEverywhere "weekly_reports" "ReplacingMergeTree(sent_at)"}}
ORDER BY (cluster, week_ending, target_version)`}},
	// Which minutes of each cluster's audit stream carried findings: the upgrade readiness
	// gate reads it to tell a live cluster (ready) from a silent one (unknown) without scanning
	// the findings. The view fills it from every insert into findings; the last statement fills
	// it from the findings stored before (uniq states: a minute inserted twice counts once).
	{Version: 4, Name: "stream minutes", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "stream_minutes"}}{{.On}} (
    cluster  {{.LC}},
    minute   DateTime('UTC'),
    findings AggregateFunction(uniq, String, String)
) ENGINE = {{.Engine "stream_minutes" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(minute)
ORDER BY (cluster, minute)`,
		`{{.Distributed "stream_minutes" "cityHash64(cluster)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.stream_minutes_mv{{.On}} TO {{.DB}}.stream_minutes AS
SELECT cluster, toStartOfMinute(event_time) AS minute, uniqState(audit_id, rule_id) AS findings
FROM {{.DB}}.findings
GROUP BY cluster, minute`, `
INSERT INTO {{.DB}}.stream_minutes (cluster, minute, findings)
SELECT cluster, toStartOfMinute(event_time) AS minute, uniqState(audit_id, rule_id) AS findings
FROM {{.DB}}.findings
GROUP BY cluster, minute`}},
	// Which minutes of each cluster's audit stream carried events, finding or not, from
	// classify's heartbeats (EventMinute rows): events is the largest running count any
	// heartbeat gave for the minute, so a redelivered heartbeat or a second classify replica
	// never inflates it (ReplacingMergeTree keeps the row with the largest events; read it
	// with max(events) ... GROUP BY cluster, minute until parts merge). It is a lower bound of
	// the minute's audit events (one replica's share when several classify replicas consume).
	{Version: 5, Name: "event minutes", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "event_minutes"}}{{.On}} (
    cluster {{.LC}},
    minute  DateTime('UTC'),
    events  UInt64
) ENGINE = {{.Engine "event_minutes" "ReplacingMergeTree(events)"}}
PARTITION BY toYYYYMM(minute)
ORDER BY (cluster, minute)`,
		`{{.Distributed "event_minutes" "cityHash64(cluster)"}}`}},
	// Exact per-day counts for the console, the weekly report and the readiness gate, which
	// would otherwise count distinct findings over months of raw rows. A finding has one
	// event_time, so it lies in one day and one caller row of that day: sums of the per-day
	// distinct counts are exact. finding_days_state keeps each day's distinct audit ids as
	// uniqExact states (a finding stored twice counts once, whenever it comes);
	// finding_day_changes the server time of the newest insert into each day. The report
	// service's compaction (package rollup) turns a day whose states no longer change into
	// plain counts in finding_days: each build of a cluster's day has rows of its own (a
	// random build id), recorded in finding_day_builds once they are all written. Readers take
	// a day from the rows of its newest recorded build when that build began after the day's
	// newest change, else from the states. finding_requests is an index of the findings by
	// blocker, caller and time (their audit ids): the raw findings are ordered by identity,
	// so the console's list of one caller's newest requests would read every finding of the
	// rule; it reads a page of ids here, then those findings by their key.
	// The last three statements fill the states, changes and requests from the findings
	// stored before (the states' GROUP BY spills to disk past 2 GB: a large store's backfill
	// holds every day's audit ids).
	{Version: 6, Name: "finding days", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_days_state"}}{{.On}} (
    cluster        {{.LC}},
    day            Date,
` + dayKeyColumns + dayStateColumns + `) ENGINE = {{.Engine "finding_days_state" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, ` + dayKeyOrder + `)`,
		`{{.Distributed "finding_days_state" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_day_changes"}}{{.On}} (
    cluster {{.LC}},
    day     Date,
    changed AggregateFunction(max, UInt32)
) ENGINE = {{.Engine "finding_day_changes" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day)`,
		`{{.Distributed "finding_day_changes" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_days"}}{{.On}} (
    cluster        {{.LC}},
    day            Date,
` + dayKeyColumns + dayCountColumns + `) ENGINE = {{.Engine "finding_days" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, ` + dayKeyOrder + `)`,
		`{{.Distributed "finding_days" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_day_builds"}}{{.On}} (
    cluster {{.LC}},
    day     Date,
    built   UInt32,
    build   UInt64
) ENGINE = {{.Engine "finding_day_builds" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day)`,
		`{{.Distributed "finding_day_builds" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_requests"}}{{.On}} (
    cluster     {{.LC}},
    rule_id     {{.LC}},
    api_group   {{.LC}},
    api_version {{.LC}},
    resource    {{.LC}},
    caller      UInt64,
    event_time  DateTime('UTC'),
    audit_id    String
) ENGINE = {{.Engine "finding_requests" "ReplacingMergeTree()"}}
PARTITION BY toYYYYMM(event_time)
ORDER BY (cluster, rule_id, api_group, api_version, resource, caller, event_time, audit_id)`,
		`{{.Distributed "finding_requests" "cityHash64(cluster, audit_id)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_requests_mv{{.On}} TO {{.DB}}.finding_requests AS
SELECT cluster, rule_id, api_group, api_version, resource, cityHash64(username, user_agent, source_ip) AS caller,
       event_time, audit_id
FROM {{.DB}}.findings`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_days_state_mv{{.On}} TO {{.DB}}.finding_days_state AS
SELECT cluster, toDate(event_time) AS day, ` + dayStateSelect + `
GROUP BY cluster, day, ` + dayKeyGroup, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_day_changes_mv{{.On}} TO {{.DB}}.finding_day_changes AS
SELECT cluster, toDate(event_time) AS day, maxState(toUInt32(now())) AS changed
FROM {{.DB}}.findings
GROUP BY cluster, day`, `
INSERT INTO {{.DB}}.finding_days_state
SELECT cluster, toDate(event_time) AS day, ` + dayStateSelect + `
GROUP BY cluster, day, ` + dayKeyGroup + `
SETTINGS max_bytes_before_external_group_by = 2000000000`, `
INSERT INTO {{.DB}}.finding_day_changes
SELECT cluster, toDate(event_time) AS day, maxState(toUInt32(now())) AS changed
FROM {{.DB}}.findings
GROUP BY cluster, day`, `
INSERT INTO {{.DB}}.finding_requests
SELECT cluster, rule_id, api_group, api_version, resource, cityHash64(username, user_agent, source_ip) AS caller,
       event_time, audit_id
FROM {{.DB}}.findings`}},
	// Today has no day build until it is over, so every read of it merged its states, a cost
	// that grew with the day's findings until midnight. The same states kept by event-time
	// hour let the compaction build today's first hours (those over) into plain rows, a
	// prefix of the day: a reader takes today from its newest current prefix and merges the
	// states of the later hours only, so the cost is bounded by an hour's findings. A finding
	// has one event_time, so it lies in one hour: a prefix and the later hours are disjoint.
	// finding_hours_state and finding_hour_changes are the hour forms of finding_days_state and
	// finding_day_changes; finding_day_prefixes holds the prefixes' rows (each under a random
	// build id, ordered by it: a reader reads one build's rows), recorded in
	// finding_day_prefix_builds with the hour each prefix ends at once they are all written.
	// The last two statements fill the hours of the last two days from the findings stored
	// before (today's hours, and yesterday's until it is over; older days are built whole and
	// never read by hour).
	{Version: 7, Name: "finding hours", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_hours_state"}}{{.On}} (
    cluster        {{.LC}},
    hour           DateTime('UTC'),
` + dayKeyColumns + dayStateColumns + `) ENGINE = {{.Engine "finding_hours_state" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour, ` + dayKeyOrder + `)`,
		`{{.Distributed "finding_hours_state" "cityHash64(cluster, toDate(hour))"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_hour_changes"}}{{.On}} (
    cluster {{.LC}},
    hour    DateTime('UTC'),
    changed AggregateFunction(max, UInt32)
) ENGINE = {{.Engine "finding_hour_changes" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour)`,
		`{{.Distributed "finding_hour_changes" "cityHash64(cluster, toDate(hour))"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_day_prefixes"}}{{.On}} (
    cluster        {{.LC}},
    day            Date,
` + dayKeyColumns + dayCountColumns + `) ENGINE = {{.Engine "finding_day_prefixes" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, build)`,
		`{{.Distributed "finding_day_prefixes" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_day_prefix_builds"}}{{.On}} (
    cluster {{.LC}},
    day     Date,
    until   DateTime('UTC'),
    built   UInt32,
    build   UInt64
) ENGINE = {{.Engine "finding_day_prefix_builds" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day)`,
		`{{.Distributed "finding_day_prefix_builds" "cityHash64(cluster, day)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_hours_state_mv{{.On}} TO {{.DB}}.finding_hours_state AS
SELECT cluster, toStartOfHour(event_time) AS hour, ` + dayStateSelect + `
GROUP BY cluster, hour, ` + dayKeyGroup, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_hour_changes_mv{{.On}} TO {{.DB}}.finding_hour_changes AS
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM {{.DB}}.findings
GROUP BY cluster, hour`, `
INSERT INTO {{.DB}}.finding_hours_state
SELECT cluster, toStartOfHour(event_time) AS hour, ` + dayStateSelect + `
WHERE event_time >= now() - INTERVAL 2 DAY
GROUP BY cluster, hour, ` + dayKeyGroup, `
INSERT INTO {{.DB}}.finding_hour_changes
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM {{.DB}}.findings
WHERE event_time >= now() - INTERVAL 2 DAY
GROUP BY cluster, hour`}},
	// Which Kubernetes release each cluster's control plane runs, from classify's heartbeats
	// (ControlPlaneSighting rows): per component, release and day, the newest minute of event
	// time the component named that release in its user agent. ReplacingMergeTree keeps the
	// row with the newest minute (read it with max(seen), or argMax(version, seen) per
	// component, until parts merge); a rollback shows as the older release seen later. The
	// day in the key keeps the history a question about a past time needs ("the release at
	// the end of last week"): without it, the newest minute of the release running today
	// would replace every earlier one, and a release seen after that time would vanish from
	// it. A few rows per cluster and day, kept forever: no partitions, no retention.
	{Version: 8, Name: "control plane sightings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "control_plane_sightings"}}{{.On}} (
    cluster   {{.LC}},
    component {{.LC}},
    version   String,
    seen      DateTime('UTC')
) ENGINE = {{.Engine "control_plane_sightings" "ReplacingMergeTree(seen)"}}
ORDER BY (cluster, component, version, toDate(seen))`,
		`{{.Distributed "control_plane_sightings" "cityHash64(cluster)"}}`}},
	// What a cluster's verdicts rest on, from classify's heartbeats (CoverageSighting rows):
	// per input (file, webhook, firehose eks, ...), audit level and kind of write ("body" or
	// "no-body" for a write a request-body rule reads, "" for any other event) and day, the
	// newest minute such an event was seen in. Read with max(seen) per kind over a window:
	// which inputs delivered events, and whether the request-body rules saw any body. A few
	// rows per cluster and day, kept forever like control_plane_sightings.
	{Version: 9, Name: "coverage sightings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "coverage_sightings"}}{{.On}} (
    cluster {{.LC}},
    input   {{.LC}},
    level   {{.LC}},
    writes  {{.LC}},
    seen    DateTime('UTC')
) ENGINE = {{.Engine "coverage_sightings" "ReplacingMergeTree(seen)"}}
ORDER BY (cluster, input, level, writes, toDate(seen))`,
		`{{.Distributed "coverage_sightings" "cityHash64(cluster)"}}`}},
	// Which callers moved off a deprecated or removed API version, from classify's heartbeats
	// (MigrationSighting rows): per API replaced (the old version's group, version and
	// resource), caller (user and user agent, as the findings name them) and day, the newest
	// second the caller called the API's successor. A caller's findings of that API older than
	// it are fixed, not blocking (package rollup reads it with max(seen)).
	{Version: 10, Name: "migration sightings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "migration_sightings"}}{{.On}} (
    cluster     {{.LC}},
    api_group   {{.LC}},
    api_version {{.LC}},
    resource    {{.LC}},
    username    String,
    user_agent  String,
    seen        DateTime('UTC')
) ENGINE = {{.Engine "migration_sightings" "ReplacingMergeTree(seen)"}}
PARTITION BY toYYYYMM(seen)
ORDER BY (cluster, api_group, api_version, resource, username, user_agent, toDate(seen))`,
		`{{.Distributed "migration_sightings" "cityHash64(cluster)"}}`}},
	// Which rule catalogue judged a cluster's events, from classify's heartbeats: per release
	// the catalogue knows removals through ("1.38") and day, the newest minute of event time a
	// heartbeat said so. A verdict for a later target cannot have checked what it changes. A
	// few rows per cluster and day, kept forever like coverage_sightings.
	{Version: 11, Name: "review sightings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "review_sightings"}}{{.On}} (
    cluster {{.LC}},
    through String,
    seen    DateTime('UTC')
) ENGINE = {{.Engine "review_sightings" "ReplacingMergeTree(seen)"}}
ORDER BY (cluster, through, toDate(seen))`,
		`{{.Distributed "review_sightings" "cityHash64(cluster)"}}`}},
	// The retention Migrate last set, per kind of table (Holds: "callers", "counts"; the newest
	// version, in Unix nanoseconds, is in force): every
	// process reads it here (the readers start their windows at the first day kept; Expire
	// deletes what is past it where the server has no TTL). On every server of a cluster.
	{Version: 12, Name: "retention settings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.retention_settings{{.On}} (
    kind    String,
    days    UInt32,
    set_at  DateTime('UTC'),
    version UInt64
) ENGINE = {{.EngineEverywhere "retention_settings" "ReplacingMergeTree(version)"}}
ORDER BY kind`}},
	// One set of numbers: migration 2's daily rollups counted with uniq (approximate) and only
	// Grafana read them, so the dashboards and the console could show different counts for
	// the same thing, and their three views cost every insert. They are dropped (the views
	// first, so no insert writes into a table being dropped); the dashboards read the exact
	// day rows through the view finding_days_current (package rollup: View), which picks
	// each day's newest current build.
	{Version: 13, Name: "one set of numbers", SQL: []string{
		`DROP TABLE IF EXISTS {{.DB}}.daily_rules_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.daily_apis_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.daily_callers_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.daily_rules{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.daily_apis{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.daily_callers{{.On}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "daily_rules"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "daily_apis"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "daily_callers"}}{{.On}}{{end}}`,
		viewV13}},
	// Who does what must run once per store (the rollup's compaction, the retention's
	// deletion) among the report processes that share it: a few rows per lease and holder
	// renewal, the newest version in force (Lease). On every server of a cluster, so that a
	// process reads back what it wrote on the server it wrote to.
	{Version: 14, Name: "leases", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.leases{{.On}} (
    lease   String,
    holder  String,
    until   DateTime('UTC'),
    version UInt64
) ENGINE = {{.EngineEverywhere "leases" "ReplacingMergeTree(version)"}}
ORDER BY lease`}},
	// One resolution of states: the day states of migration 6 were the hour states of
	// migration 7 summed by day, written by a second pair of views on every insert. The hours
	// are now the only states, kept as long as the callers' retention (no longer pruned two
	// days after their day): the rollup builds a day from its hours, reads an unbuilt day
	// from them, and takes a day's last change as its hours' newest. The first statement
	// fills the hours of every finding stored (a state counts a finding once, so the hours
	// already filled stay exact); the second marks each hour that has no change time yet as
	// changed now. The day tables and their views go (the views first), with the view
	// finding_days_current over them (migration 16 creates it anew). Every statement may run
	// again (a step interrupted): none reads a table the step drops.
	{Version: 15, Name: "hour states only", SQL: []string{`
INSERT INTO {{.DB}}.finding_hours_state (cluster, hour, ` + dayKeyOrder + `, message, findings, first_seen, last_seen)
SELECT cluster, toStartOfHour(event_time) AS hour, ` + dayStateSelect + `
GROUP BY cluster, hour, ` + dayKeyGroup + `
SETTINGS max_bytes_before_external_group_by = 2000000000`, `
INSERT INTO {{.DB}}.finding_hour_changes
SELECT cluster, toStartOfHour(event_time) AS hour, maxState(toUInt32(now())) AS changed
FROM {{.DB}}.findings
WHERE (cluster, hour) GLOBAL NOT IN (SELECT cluster, hour FROM {{.DB}}.finding_hour_changes)
GROUP BY cluster, hour`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_days_current{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_days_state_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_day_changes_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_days_state{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_day_changes{{.On}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_days_state"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_day_changes"}}{{.On}}{{end}}`}},
	// One builds table and one rows table: a build covers its day's hours before until (the
	// next midnight for a day built whole, an hour of the day for a prefix of the day under
	// way), so the day builds (migration 6) and the prefixes (migration 7) were one thing in
	// four tables, read by two planners. finding_builds records every build, finding_rows
	// holds their rows, ordered by build: a reader reads a build's rows as one range. The four
	// tables are dropped, not copied: builds are made from the hour states, and the first
	// compaction after the step builds every day again (until then the days are read from
	// their states, exact and dearer). A copy could not be repeated: run again after an
	// interruption, it would copy a build's rows twice.
	{Version: 16, Name: "one builds table", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_rows"}}{{.On}} (
    cluster        {{.LC}},
    day            Date,
` + dayKeyColumns + dayCountColumns + `) ENGINE = {{.Engine "finding_rows" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day, build, ` + dayKeyOrder + `)`,
		`{{.Distributed "finding_rows" "cityHash64(cluster, day)"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_builds"}}{{.On}} (
    cluster {{.LC}},
    day     Date,
    until   DateTime('UTC'),
    built   UInt32,
    build   UInt64
) ENGINE = {{.Engine "finding_builds" "MergeTree()"}}
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, day)`,
		`{{.Distributed "finding_builds" "cityHash64(cluster, day)"}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_days_current{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_day_builds{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_day_prefix_builds{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_days{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_day_prefixes{{.On}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_day_builds"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_day_prefix_builds"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_days"}}{{.On}}{{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_day_prefixes"}}{{.On}}{{end}}`,
		viewV16}},
	// Hashes at insert: the readers group the day rows by what was used (the rule and the API)
	// and by who used it (user, user agent, source IP) through a 64-bit hash of each
	// (rollup.BlockerHash, rollup.CallerHash), which every read computed from the strings.
	// The build rows now hold them as columns, computed by their defaults when the compaction
	// inserts a build (and for the rows built before, when read until their parts merge).
	// The hour states do not: ClickHouse 18.16 fills no default in a materialized view's
	// insert, and a view cannot be replaced without a moment in which inserts fail or skip it;
	// their reads are bounded by the hours not built yet.
	{Version: 17, Name: "hashes at insert", SQL: addColumns("finding_rows", "cityHash64(cluster, day)",
		"blocker UInt64 DEFAULT cityHash64(rule_id, api_group, api_version, resource)",
		"caller UInt64 DEFAULT cityHash64(username, user_agent, source_ip)")},
	// Hashes in the hour states, names by hash. The hour states of migration 7 computed the
	// blocker and caller hashes whenever they were merged, and the readers took the names
	// behind the hashes from their key columns (over the days of a window, again when a
	// replica lagged). finding_hour_states holds the states with both hashes as columns,
	// written by its view at insert (ClickHouse 18.16 fills no default in a view's insert, so
	// a new table and view, not a column added), and in its sorting key (they follow from the
	// key's columns, so the rows a merge collapses are the same, and a lookup of one hash in an
	// hour reads a range); blocker_names and caller_names hold each hash's names once, with
	// the newest day they were seen (the compaction adds those of the hours it builds;
	// rollup.NamesOf reads them). The step creates the new view before it
	// copies the old states: an insert in between reaches both tables, and a state counts a
	// finding once however often it is merged, so the copy stays exact, and so does a step run
	// again after an interruption. Migration 19 drops the old table and its view.
	{Version: 18, Name: "hour states with hashes", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "finding_hour_states"}}{{.On}} (
    cluster        {{.LC}},
    hour           DateTime('UTC'),
    blocker        UInt64,
    caller         UInt64,
` + dayKeyColumns + dayStateColumns + `) ENGINE = {{.Engine "finding_hour_states" "AggregatingMergeTree()"}}
PARTITION BY toYYYYMM(hour)
ORDER BY (cluster, hour, blocker, caller, ` + dayKeyOrder + `)`,
		`{{.Distributed "finding_hour_states" "cityHash64(cluster, toDate(hour))"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "blocker_names"}}{{.On}} (
    blocker     UInt64,
    rule_id     {{.LC}},
    api_group   {{.LC}},
    api_version {{.LC}},
    resource    {{.LC}},
    removed_in  {{.LC}},
    replacement {{.LC}},
    seen        Date
) ENGINE = {{.Engine "blocker_names" "ReplacingMergeTree(seen)"}}
ORDER BY blocker`,
		`{{.Distributed "blocker_names" "blocker"}}`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.{{.Local "caller_names"}}{{.On}} (
    caller      UInt64,
    username    String,
    user_agent  String,
    source_ip   String,
    seen        Date
) ENGINE = {{.Engine "caller_names" "ReplacingMergeTree(seen)"}}
ORDER BY caller`,
		`{{.Distributed "caller_names" "caller"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_hour_states_mv{{.On}} TO {{.DB}}.finding_hour_states AS
SELECT cluster, toStartOfHour(event_time) AS hour, ` + hashSelect + `, ` + dayStateSelect + `
GROUP BY cluster, hour, ` + dayKeyGroup, `
INSERT INTO {{.DB}}.finding_hour_states (cluster, hour, blocker, caller, ` + dayKeyOrder + `, message, findings, first_seen, last_seen)
SELECT cluster, hour, ` + hashSelect + `, ` + dayKeyOrder + `, message, findings, first_seen, last_seen
FROM {{.DB}}.finding_hours_state`, `
INSERT INTO {{.DB}}.blocker_names (blocker, rule_id, api_group, api_version, resource, removed_in, replacement, seen)
SELECT blocker, any(rule_id), any(api_group), any(api_version), any(resource), argMax(removed_in, hour), argMax(replacement, hour),
       toDate(max(hour))
FROM {{.DB}}.finding_hour_states
GROUP BY blocker`, `
INSERT INTO {{.DB}}.caller_names (caller, username, user_agent, source_ip, seen)
SELECT caller, any(username), any(user_agent), any(source_ip), toDate(max(hour))
FROM {{.DB}}.finding_hour_states
GROUP BY caller`}},
	// One table of hour states: the states without hashes and their view go, with the view
	// finding_days_current over them, created anew over finding_hour_states.
	{Version: 19, Name: "one table of hour states", SQL: []string{
		`DROP TABLE IF EXISTS {{.DB}}.finding_days_current{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_hours_state_mv{{.On}}`,
		`DROP TABLE IF EXISTS {{.DB}}.finding_hours_state{{.On}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.{{.Local "finding_hours_state"}}{{.On}}{{end}}`,
		rollup.ViewSQL}},
	// The request time in a finding's identity. A client may send its own Audit-ID header and
	// the kube-apiserver keeps it, so two requests may share an audit ID: ordered by (cluster,
	// rule_id, audit_id), the second replaced the first when parts merged, while the hour
	// states, counting audit IDs per caller and hour, counted the two once where they met and
	// twice where they did not. A finding now carries request_received, its request's
	// requestReceivedTimestamp in Unix seconds (every stage of one request has the same; 0 for a
	// sighting and an event without one), added to the sorting key: ClickHouse adds to a
	// sorting key only a column added in the same ALTER, without a default expression, so the
	// findings stored before hold 0 and keep their identity. On a cluster the Distributed
	// findings table is created again over its local tables to show the column (as migration
	// 17); a cluster of ClickHouse 18.16 does not distribute MODIFY ORDER BY (its distributed
	// DDL takes only column, partition and mutation alters), so there the column is added and
	// the sorting key stays: the raw table keeps one of two requests sharing an audit ID
	// once parts merge, while the hour states and builds count both. The hour states count
	// the same identity through a new view, created before the old one is dropped: an insert
	// in between reaches both, and one that has no request_received (a report of the version
	// before, still running) counts the same key in both, its audit ID.
	{Version: 20, Name: "request time in a finding's identity", SQL: []string{
		`ALTER TABLE {{.DB}}.{{.Local "findings"}}{{.On}} ADD COLUMN request_received UInt32` +
			`{{if or .Modern (not .Cluster)}}, MODIFY ORDER BY (cluster, rule_id, audit_id, request_received){{end}}`,
		`{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.findings{{.On}}{{end}}`,
		`{{.Distributed "findings" "cityHash64(cluster, audit_id)"}}`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.finding_hour_states_by_request_mv{{.On}} TO {{.DB}}.finding_hour_states AS
SELECT cluster, toStartOfHour(event_time) AS hour, ` + hashSelect + `, ` + requestStateSelect + `
GROUP BY cluster, hour, ` + dayKeyGroup,
		`DROP TABLE IF EXISTS {{.DB}}.finding_hour_states_mv{{.On}}`}},
	// The move key at build: a day row meets its caller's moves (rollup.Days with
	// migration sightings) by one hash of the cluster, the API and the caller's user and
	// agent, which every read computed from five strings a row (a month of the busier
	// cluster's blockers with the moves at 10 M findings: 146-214 ms computed, 108-147 ms
	// stored). The build rows now hold it, computed by its default when the compaction inserts
	// a build (and for the rows built before, when read until their parts merge), as
	// migration 17's hashes are.
	{Version: 21, Name: "move key at build", SQL: addColumns("finding_rows", "cityHash64(cluster, day)",
		"move_key UInt64 DEFAULT cityHash64(cluster, api_group, api_version, resource, username, user_agent)")},
}

// requestStateSelect is dayStateSelect counting a finding by its whole identity (migration 20):
// the audit ID, and its request_received after it when there is one.
const requestStateSelect = `rule_id, removed_in_key, api_group, api_version, resource, removed_in, replacement,
       username, user_agent, namespace, source_ip,
       anyState(message) AS message,
       uniqExactState(if(request_received = 0, audit_id, concat(audit_id, '@', toString(request_received)))) AS findings,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings`

// hashSelect gives the blocker and caller hashes (rollup.BlockerHash and rollup.CallerHash)
// as columns of migration 18's hour states.
const hashSelect = `cityHash64(rule_id, api_group, api_version, resource) AS blocker, cityHash64(username, user_agent, source_ip) AS caller`

// addColumns returns the statements of a migration that adds the columns cols (name, type
// and default) to table, whose Distributed table on a cluster shards by shardingKey: one
// column a statement, as ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS (Migrate takes a
// column already there as added). On a cluster the Distributed table is created again over
// the local tables (18.16 alters no table ON CLUSTER that is neither replicated nor on a
// cluster without internal replication). Migration 17 added the hash columns so (their
// expressions are rollup.BlockerHash and rollup.CallerHash), migration 21 the move key.
func addColumns(table, shardingKey string, cols ...string) []string {
	var out []string
	for _, c := range cols {
		out = append(out, `ALTER TABLE {{.DB}}.{{.Local "`+table+`"}}{{.On}} ADD COLUMN `+c)
	}
	return append(out, `{{if .Cluster}}DROP TABLE IF EXISTS {{.DB}}.`+table+`{{.On}}{{end}}`,
		`{{.Distributed "`+table+`" "`+shardingKey+`"}}`)
}
