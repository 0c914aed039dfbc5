package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// FindingColumns are the columns WriteFindings fills, in the order of FindingRow.
var FindingColumns = []string{
	"rule_id", "severity", "cluster", "audit_id", "event_time", "verb", "request_uri",
	"api_group", "api_version", "resource", "subresource", "namespace", "name", "username",
	"user_agent", "source_ip", "response_code", "deprecated_in", "removed_in", "removed_in_key",
	"replacement", "message", "stage", "node", "confidence", "evidence_path", "evidence_value",
	"ingested_at", "request_received",
}

// FindingRow is f as a row of FindingColumns. A finding without event_time takes ingested.
func FindingRow(f *auditlensv1.Finding, ingested time.Time) []any {
	var b Block
	b.Append(f)
	return b.row(0, ingested.UTC().Truncate(time.Second))
}

// WriteFindings inserts findings as one block. Re-inserting a finding is harmless: see the
// package documentation on counting.
func (s *Store) WriteFindings(ctx context.Context, fs []*auditlensv1.Finding) error {
	var b Block
	for _, f := range fs {
		b.Append(f)
	}
	return s.WriteBlock(ctx, &b)
}

// WriteBlock inserts the findings of b as one block; findings without event time take the
// time of the insert. b is not changed and may be written again (a retry).
func (s *Store) WriteBlock(ctx context.Context, b *Block) error {
	return s.WriteBlockAt(ctx, b, time.Now())
}

// WriteBlockAt inserts the findings of b as one block with ingested_at (to the second) as
// the time of the insert. Writing the same block with the same time again (a retry of a write
// whose outcome is unknown) sends identical data, which a replicated table stores once
// (block de-duplication), on every shard it reached the first time.
func (s *Store) WriteBlockAt(ctx context.Context, b *Block, ingested time.Time) error {
	if b.Len() == 0 {
		return nil
	}
	now := ingested.UTC().Truncate(time.Second)
	if bi, ok := s.be.(blockInserter); ok {
		if err := bi.insertBlock(ctx, s.Table("findings"), b, now); err != nil {
			return fmt.Errorf("insert %d rows into findings: %w", b.Len(), err)
		}
		return nil
	}
	rows := make([][]any, b.Len())
	for i := range rows {
		rows[i] = b.row(i, now)
	}
	return s.Insert(ctx, "findings", FindingColumns, rows)
}

// blockInserter is a backend that writes a Block column by column, much cheaper for big
// blocks than rows of boxed values.
type blockInserter interface {
	insertBlock(ctx context.Context, table string, b *Block, ingested time.Time) error
}

// enumName turns SEVERITY_CRITICAL into "critical" and the unspecified value into "".
func enumName(s, prefix string) string {
	s = strings.ToLower(strings.TrimPrefix(s, prefix))
	if s == "unspecified" {
		return ""
	}
	return s
}

// VersionKey orders Kubernetes releases in SQL: "1.22" is 1022, "v1.25.3" is 1025 (the
// kubeversion Key); an empty or unreadable version is 0. VersionKeySQL is the same in SQL.
func VersionKey(v string) uint32 {
	k, err := kubeversion.Parse(v)
	if err != nil {
		return 0
	}
	return uint32(k.Key())
}

// VersionKeySQL is the SQL expression of VersionKey for a string expression expr.
func VersionKeySQL(expr string) string {
	v := "splitByChar('.', replaceRegexpOne(" + expr + ", '^v', ''))"
	return "if(length(" + v + ") < 2, 0, toUInt32OrZero(" + v + "[1]) * 1000 + toUInt32OrZero(" + v + "[2]))"
}
