package command

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/mail/mailpittest"
)

// shared is the test's store, left open when a run closes it.
type shared struct{ *store.Store }

func (shared) Close() error { return nil }

// serverEngine hands every run the store of a ClickHouse 18.16 server started for the test.
func serverEngine(t *testing.T) (Engine, *store.Store) {
	_, st := chtest.ServerStore(t)
	return Engine{
		RegisterFlags: func(fs *flag.FlagSet) { fs.String("clickhouse-dsn", "", "") },
		Open:          func(context.Context) (Store, error) { return shared{st}, nil },
		Now:           testkit.Now,
	}, st
}

func TestWeeklyCommand(t *testing.T) {
	eng, st := serverEngine(t)
	week := weekly.LastWeekEnding(testkit.Now().UTC())
	start := week.AddDate(0, 0, -6)
	var fs []*auditlensv1.Finding
	for i, u := range []string{"alice", "<b>bob</b>"} {
		fs = append(fs, &auditlensv1.Finding{RuleId: "psp", Cluster: "prod", AuditId: "id" + u,
			EventTime: timestamppb.New(start.Add(time.Duration(i) * time.Hour)), ApiGroup: "policy", ApiVersion: "v1beta1",
			Resource: "podsecuritypolicies", RemovedIn: "1.25", Username: u, UserAgent: "kubectl/v1.24.0", Namespace: "kube-system"})
	}
	if err := st.WriteFindings(context.Background(), fs); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := Main(args, &out, &errb, eng)
		return code, out.String(), errb.String()
	}
	base := []string{"--cluster", "prod", "--target-version", "1.25", "--week-ending", week.String()}

	t.Run("json to a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "r.json")
		code, _, errs := run(t, append(base, "--format", "json", "--out", file)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var r weekly.Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Blockers) != 1 || len(r.Blockers[0].Callers) != 2 || r.Totals.Findings != 2 || r.WeekEnding != week {
			t.Fatalf("report %+v", r)
		}
	})
	t.Run("html to stdout", func(t *testing.T) {
		code, out, errs := run(t, append(base, "--format", "html")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if !strings.Contains(out, `<tr class="blocker">`) || !strings.Contains(out, `src="data:image/png;base64,`) ||
			!strings.Contains(out, "&lt;b&gt;bob&lt;/b&gt;") {
			t.Fatalf("html lacks blockers, inline charts or escaping:\n%s", out)
		}
	})
	t.Run("csv", func(t *testing.T) {
		code, out, errs := run(t, append(base, "--format", "csv")...)
		if code != 0 || strings.Count(out, "\n") != 3 || !strings.HasPrefix(out, "cluster,week_ending,target_version,rule_id") {
			t.Fatalf("exit %d: %s\n%s", code, errs, out)
		}
	})
	t.Run("bad usage", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--format", "pdf"}, "--format"},
			{[]string{"--week-ending", "22/11/2026"}, "--week-ending"},
			{[]string{"--week-ending", "2999-01-03"}, "future"},
			{[]string{"--week-ending", "0001-01-01"}, "--week-ending 0001-01-01"},
			{[]string{"--week-ending", "1969-12-28"}, "--week-ending 1969-12-28"},
			{[]string{"--target-version", "1.1000"}, "target-version"},
			{[]string{"--target-version", "one"}, "target-version"},
			{[]string{"--force"}, "--force"},
			{[]string{"--send"}, "--smtp-addr"},
			{[]string{"extra"}, "unexpected argument"},
		} {
			code, _, errs := run(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", tc.args, code, errs, tc.want)
			}
		}
		if code, _, errs := run(t, "--help"); code != 0 || !strings.Contains(errs, "AUDITLENS_TARGET_VERSION") {
			t.Errorf("--help: exit %d\n%s", code, errs)
		}
	})
	t.Run("send once", func(t *testing.T) {
		mp, err := mailpittest.Start(t.TempDir(), mailpittest.Options{})
		if err != nil {
			enginetest.Unavailable(t, "mailpit", err)
		}
		defer mp.Close()
		send := append(base, "--send", "--smtp-addr", mp.SMTPAddr, "--smtp-starttls", "off",
			"--mail-from", "auditlens@example.com", "--mail-to", "a@example.com,b@example.com")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if code, _, errs := run(t, send...); code != 0 || !strings.Contains(errs, "sent the week") {
			t.Fatalf("first send: exit %d: %s", code, errs)
		}
		if code, _, errs := run(t, send...); code != 0 || !strings.Contains(errs, "already sent") {
			t.Fatalf("second send: exit %d: %s", code, errs)
		}
		if ms, err := mp.Messages(ctx); err != nil || len(ms) != 1 || len(ms[0].To) != 2 {
			t.Fatalf("want one message to two recipients, got %+v %v", ms, err)
		}
		if code, _, errs := run(t, append(send, "--force")...); code != 0 {
			t.Fatalf("forced send: exit %d: %s", code, errs)
		}
		if ms, err := mp.WaitMessages(ctx, 2); err != nil || len(ms) != 2 {
			t.Fatalf("want two messages after --force, got %d %v", len(ms), err)
		}
	})
}
