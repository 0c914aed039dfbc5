package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
)

// TestReadinessMainOnServer runs `report readiness` as a pipeline would, on the server the
// service writes: unknown (4) for a silent cluster, an error (1) naming the known clusters for
// a cluster never seen, blocked (3) by a blocker, ready (0) once
// --acknowledgements-file accepts it (the stream allowed to be quiet), and a refused file
// (1) named at its line and column.
func TestReadinessMainOnServer(t *testing.T) {
	srv, st := chtest.ServerStore(t)
	now := testkit.Now().UTC()
	if err := st.WriteFindings(context.Background(), []*auditlensv1.Finding{{RuleId: "removed-api", Cluster: "prod", AuditId: "a1",
		EventTime: timestamppb.New(now.Add(-time.Hour)), ApiGroup: "flowcontrol.apiserver.k8s.io", ApiVersion: "v1beta3",
		Resource: "flowschemas", RemovedIn: "1.32", Username: "prometheus"}, {RuleId: "deprecated-api", Cluster: "staging", AuditId: "s1",
		EventTime: timestamppb.New(now.Add(-100 * time.Hour)), ApiVersion: "v1", Resource: "componentstatuses", Username: "prober"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	acks := filepath.Join(dir, "acks.yaml")
	if err := os.WriteFile(acks, []byte("schema_version: 1\nacknowledgements:\n  - api: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas\n    reason: vendor fix next week\n    accepted_by: ops@example.com\n    expires: 2105-01-01\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("schema_version: 1\nacknowledgements:\n  - rule: psp\n    reason: r\n    accepted_by: me\n    expires: tomorrow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN(st.Database())
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--cluster", "staging"}, 4, "staging: unknown for 1.34"},
		{[]string{"--cluster", "nosuch"}, 1, `no event from cluster "nosuch" has ever been stored; the clusters with events: prod, staging`},
		{[]string{"--cluster", "prod"}, 3, "blocker: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"},
		{[]string{"--cluster", "prod", "--acknowledgements-file", acks, "--readiness-max-silence", "168h"}, 0, "accepted until 2105-01-01: flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"},
		{[]string{"--cluster", "prod", "--acknowledgements-file", bad}, 1, bad + `:6:14: expires "tomorrow"`},
		{[]string{"--cluster", "prod", "--target-version", "banana"}, 2, "banana"},
		{[]string{"--target-version", "1.34"}, 2, "--cluster is required"},
	} {
		args := append([]string{"readiness", "--clickhouse-dsn", dsn, "--target-version", "1.34"}, c.args...)
		var out bytes.Buffer
		if code := run(args, &out, &out); code != c.code || !strings.Contains(out.String(), c.out) {
			t.Errorf("report %v: exit %d, want %d, output containing %q:\n%s", c.args, code, c.code, c.out, out.String())
		}
	}
}

// A store an older report wrote (without the newest migrations) is refused with what to run,
// not with ClickHouse's unknown-table error.
func TestReadinessMainOnOldSchema(t *testing.T) {
	srv, st := chtest.ServerStore(t)
	db := st.DB()
	old := st.Database() + "_old"
	for _, q := range []string{
		"CREATE DATABASE " + old,
		"CREATE TABLE " + old + ".schema_migrations AS " + st.Database() + ".schema_migrations",
		"INSERT INTO " + old + ".schema_migrations SELECT * FROM " + st.Database() + ".schema_migrations WHERE version <= 3",
	} {
		if _, err := db.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var out bytes.Buffer
	code := run([]string{"readiness", "--clickhouse-dsn", srv.DSN(old), "--cluster", "prod", "--target-version", "1.34"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "lacks schema migration 4 (stream minutes)") || !strings.Contains(out.String(), "report migrate") {
		t.Errorf("old schema: exit %d, want 1 and what to run:\n%s", code, out.String())
	}
}
