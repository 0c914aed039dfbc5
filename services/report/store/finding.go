package store

import (
	"context"
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

// FindingRow is f as a row of FindingColumns. A finding without event_time takes ingested.
func FindingRow(f *auditlensv1.Finding, ingested time.Time) []any {
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
	return []any{
		f.GetRuleId(), enumName(f.GetSeverity().String(), "SEVERITY_"), f.GetCluster(), f.GetAuditId(),
		et.UTC().Truncate(time.Second), f.GetVerb(), f.GetRequestUri(),
		f.GetApiGroup(), f.GetApiVersion(), f.GetResource(), f.GetSubresource(), f.GetNamespace(),
		f.GetName(), f.GetUsername(), f.GetUserAgent(), f.GetSourceIp(), f.GetResponseCode(),
		f.GetDeprecatedIn(), f.GetRemovedIn(), VersionKey(f.GetRemovedIn()),
		f.GetReplacement(), f.GetMessage(), f.GetStage(), f.GetNode(),
		enumName(f.GetConfidence().String(), "CONFIDENCE_"), paths, values,
		ingested.UTC().Truncate(time.Second),
	}
}

// WriteFindings inserts findings as one block. Re-inserting a finding is harmless: see the
// package documentation on counting.
func (s *Store) WriteFindings(ctx context.Context, fs []*auditlensv1.Finding) error {
	now := time.Now()
	rows := make([][]any, len(fs))
	for i, f := range fs {
		rows[i] = FindingRow(f, now)
	}
	return s.Insert(ctx, "findings", FindingColumns, rows)
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
	return "(toUInt32OrZero(" + v + "[1]) * 1000 + toUInt32OrZero(" + v + "[2]))"
}
