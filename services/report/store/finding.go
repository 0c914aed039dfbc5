package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// FindingColumns are the columns WriteFindings fills, in the order of FindingRow.
var FindingColumns = []string{
	"rule_id", "severity", "cluster", "audit_id", "event_time", "verb", "request_uri",
	"api_group", "api_version", "resource", "subresource", "namespace", "name", "username",
	"user_agent", "source_ip", "response_code", "deprecated_in", "removed_in", "removed_in_key",
	"replacement", "message", "stage", "node", "confidence", "evidence_path", "evidence_value",
	"ingested_at",
}

// findingRow is one finding converted for the findings table.
type findingRow struct {
	rule, sev, cluster, audit                          string
	eventTime                                          time.Time
	verb, uri, group, version, resource, sub, ns, name string
	user, agent, ip                                    string
	code                                               int32
	deprecated, removed                                string
	removedKey                                         uint32
	replacement, message, stage, node, confidence      string
	paths, values                                      []string
	ingested                                           time.Time
}

func toRow(f *auditlensv1.Finding, ingested time.Time) findingRow {
	et := ingested
	if ts := f.GetEventTime(); ts != nil && (ts.Seconds != 0 || ts.Nanos != 0) {
		et = ts.AsTime()
	}
	ev := f.GetEvidence()
	paths := make([]string, len(ev))
	values := make([]string, len(ev))
	for i, e := range ev {
		paths[i] = e.GetPath()
		values[i] = e.GetValue()
	}
	return findingRow{
		rule: f.GetRuleId(), sev: enumName(f.GetSeverity().String(), "SEVERITY_"), cluster: f.GetCluster(), audit: f.GetAuditId(),
		eventTime: et.UTC().Truncate(time.Second),
		verb:      f.GetVerb(), uri: f.GetRequestUri(), group: f.GetApiGroup(), version: f.GetApiVersion(),
		resource: f.GetResource(), sub: f.GetSubresource(), ns: f.GetNamespace(), name: f.GetName(),
		user: f.GetUsername(), agent: f.GetUserAgent(), ip: f.GetSourceIp(), code: f.GetResponseCode(),
		deprecated: f.GetDeprecatedIn(), removed: f.GetRemovedIn(), removedKey: VersionKey(f.GetRemovedIn()),
		replacement: f.GetReplacement(), message: f.GetMessage(), stage: f.GetStage(), node: f.GetNode(),
		confidence: enumName(f.GetConfidence().String(), "CONFIDENCE_"), paths: paths, values: values,
		ingested: ingested.UTC().Truncate(time.Second),
	}
}

// FindingRow is f as a row of FindingColumns. A finding without event_time takes ingested.
func FindingRow(f *auditlensv1.Finding, ingested time.Time) []any {
	r := toRow(f, ingested)
	return []any{r.rule, r.sev, r.cluster, r.audit, r.eventTime, r.verb, r.uri, r.group, r.version,
		r.resource, r.sub, r.ns, r.name, r.user, r.agent, r.ip, r.code, r.deprecated, r.removed,
		r.removedKey, r.replacement, r.message, r.stage, r.node, r.confidence, r.paths, r.values, r.ingested}
}

// WriteFindings inserts findings as one block. Re-inserting a finding is harmless: see the
// package documentation on counting.
func (s *Store) WriteFindings(ctx context.Context, fs []*auditlensv1.Finding) error {
	if len(fs) == 0 {
		return nil
	}
	now := time.Now()
	if ci, ok := s.be.(ColumnInserter); ok {
		if err := ci.InsertColumns(ctx, s.Table("findings"), FindingColumns, findingColumns(fs, now)); err != nil {
			return fmt.Errorf("insert %d rows into findings: %w", len(fs), err)
		}
		return nil
	}
	rows := make([][]any, len(fs))
	for i, f := range fs {
		rows[i] = FindingRow(f, now)
	}
	return s.Insert(ctx, "findings", FindingColumns, rows)
}

// findingColumns is fs as one typed slice per column of FindingColumns, the cheap way to
// hand a block to clickhouse-go (no boxing of every value).
func findingColumns(fs []*auditlensv1.Finding, ingested time.Time) []any {
	n := len(fs)
	str := func() []string { return make([]string, n) }
	rule, sev, cluster, audit, verb, uri := str(), str(), str(), str(), str(), str()
	group, version, resource, sub, ns, name := str(), str(), str(), str(), str(), str()
	user, agent, ip, depr, removed, repl := str(), str(), str(), str(), str(), str()
	msg, stage, node, conf := str(), str(), str(), str()
	times, ingestedAt := make([]time.Time, n), make([]time.Time, n)
	codes, keys := make([]int32, n), make([]uint32, n)
	paths, values := make([][]string, n), make([][]string, n)
	for i, f := range fs {
		r := toRow(f, ingested)
		rule[i], sev[i], cluster[i], audit[i], times[i] = r.rule, r.sev, r.cluster, r.audit, r.eventTime
		verb[i], uri[i], group[i], version[i], resource[i] = r.verb, r.uri, r.group, r.version, r.resource
		sub[i], ns[i], name[i], user[i], agent[i], ip[i] = r.sub, r.ns, r.name, r.user, r.agent, r.ip
		codes[i], depr[i], removed[i], keys[i] = r.code, r.deprecated, r.removed, r.removedKey
		repl[i], msg[i], stage[i], node[i], conf[i] = r.replacement, r.message, r.stage, r.node, r.confidence
		paths[i], values[i], ingestedAt[i] = r.paths, r.values, r.ingested
	}
	return []any{rule, sev, cluster, audit, times, verb, uri, group, version, resource, sub, ns, name,
		user, agent, ip, codes, depr, removed, keys, repl, msg, stage, node, conf, paths, values, ingestedAt}
}

// enumName turns SEVERITY_CRITICAL into "critical" and the unspecified value into "".
func enumName(s, prefix string) string {
	s = strings.ToLower(strings.TrimPrefix(s, prefix))
	if s == "unspecified" {
		return ""
	}
	return s
}

// VersionKey orders Kubernetes releases in SQL: "1.22" is 1022, "v1.25.3" is 1025; an empty
// or unreadable version is 0. VersionKeySQL is the same in SQL.
func VersionKey(v string) uint32 {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	maj, rest, ok := strings.Cut(v, ".")
	if !ok {
		return 0
	}
	min, _, _ := strings.Cut(rest, ".")
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil || b >= 1000 {
		return 0
	}
	return uint32(a*1000 + b)
}

// VersionKeySQL is the SQL expression of VersionKey for a string expression expr.
func VersionKeySQL(expr string) string {
	v := "splitByChar('.', replaceRegexpOne(" + expr + ", '^v', ''))"
	return "if(length(" + v + ") < 2, 0, toUInt32OrZero(" + v + "[1]) * 1000 + toUInt32OrZero(" + v + "[2]))"
}
