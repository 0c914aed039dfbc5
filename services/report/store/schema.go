package store

import (
	"bytes"
	"text/template"
)

// Migration is one versioned step of the schema. Its statements are idempotent (IF NOT
// EXISTS), so a step interrupted half-way, or run by two replicas at once, is safe to repeat.
type Migration struct {
	Version int
	Name    string
	// SQL holds the statements as text/template, rendered with schemaVars.
	SQL []string
}

// schemaVars fill the statement templates for one engine.
type schemaVars struct {
	DB string
	// LC is the type of low-cardinality strings: LowCardinality(String) on modern servers,
	// String on 18.16, where LowCardinality is experimental.
	LC string
}

func varsFor(database string, v Version) schemaVars {
	lc := "String"
	if v.Modern() {
		lc = "LowCardinality(String)"
	}
	return schemaVars{DB: database, LC: lc}
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
		out = append(out, b.String())
	}
	return out, nil
}

// Migrations is the schema history, oldest first. Append new steps; never edit applied ones.
var Migrations = []Migration{
	{Version: 1, Name: "findings", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.findings (
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
) ENGINE = ReplacingMergeTree(ingested_at)
PARTITION BY toYYYYMM(event_time)
ORDER BY (cluster, rule_id, audit_id)`}},
	{Version: 2, Name: "daily rollups", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.daily_rules (
    day        Date,
    cluster    {{.LC}},
    rule_id    {{.LC}},
    severity   {{.LC}},
    findings   AggregateFunction(uniq, String),
    first_seen AggregateFunction(min, DateTime('UTC')),
    last_seen  AggregateFunction(max, DateTime('UTC'))
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, severity, day)`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_rules_mv TO {{.DB}}.daily_rules AS
SELECT toDate(event_time) AS day, cluster, rule_id, severity,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, severity`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.daily_apis (
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
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement, day)`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_apis_mv TO {{.DB}}.daily_apis AS
SELECT toDate(event_time) AS day, cluster, rule_id, api_group, api_version, resource,
       deprecated_in, removed_in, removed_in_key, replacement,
       uniqState(audit_id) AS findings, uniqState(username) AS callers,
       minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, api_group, api_version, resource, deprecated_in, removed_in, removed_in_key, replacement`, `
CREATE TABLE IF NOT EXISTS {{.DB}}.daily_callers (
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
) ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(day)
ORDER BY (cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip, day)`, `
CREATE MATERIALIZED VIEW IF NOT EXISTS {{.DB}}.daily_callers_mv TO {{.DB}}.daily_callers AS
SELECT toDate(event_time) AS day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip,
       uniqState(audit_id) AS findings, minState(event_time) AS first_seen, maxState(event_time) AS last_seen
FROM {{.DB}}.findings
GROUP BY day, cluster, rule_id, removed_in_key, username, user_agent, namespace, source_ip`}},
	{Version: 3, Name: "weekly reports", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.weekly_reports (
    cluster        String,
    week_ending    Date,
    target_version String,
    recipients     Array(String),
    sent_at        DateTime('UTC'),
    status         String
) ENGINE = ReplacingMergeTree(sent_at)
ORDER BY (cluster, week_ending, target_version)`}},
}
