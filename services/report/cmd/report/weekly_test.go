package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/weekly"
)

func TestWeeklyMainFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := weeklyMain([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"AUDITLENS_CLICKHOUSE_DSN", "AUDITLENS_CLICKHOUSE_DATA_DIR", "AUDITLENS_TARGET_VERSION", "AUDITLENS_SMTP_PASSWORD_FILE", "AUDITLENS_MAIL_TO"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("--help lacks %s", want)
		}
	}
	errb.Reset()
	if code := weeklyMain([]string{"--clickhouse-dsn", "http://h:8123"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--clickhouse-dsn") {
		t.Fatalf("bad dsn: exit %d: %s", code, errb.String())
	}
}

func TestWeeklyMainOnServer(t *testing.T) {
	srv, st := chtest.ServerStore(t)
	var out, errb bytes.Buffer
	week := weekly.LastWeekEnding(testkit.Now().UTC()).String()
	// An empty store names no release to judge the next of: the target is asked for.
	code := weeklyMain([]string{"--clickhouse-dsn", srv.DSN(st.Database()), "--format", "json", "--week-ending", week}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), `--target-version is required: the release of cluster "default" is unknown`) {
		t.Fatalf("no target on an empty store: exit %d: %s", code, errb.String())
	}
	out.Reset()
	code = weeklyMain([]string{"--clickhouse-dsn", srv.DSN(st.Database()), "--format", "json", "--week-ending", week, "--target-version", "1.25"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r weekly.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.WeekEnding.String() != week || r.Cluster != "default" || len(r.Blockers) != 0 {
		t.Fatalf("report %+v", r)
	}
}
