package report

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/kubeclient"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/mail"
	"github.com/auditlens/auditlens/services/report/weekly/mail/mailpittest"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
)

const ownersYAML = `schema_version: 1
teams:
  - name: web
    email: [web@example.com]
    namespaces: [web]
    usernames: ["system:serviceaccount:web:*"]
  - name: data
    email: [data@example.com, data-lead@example.com]
    user_agents: ["spark-operator/*"]
`

const acksYAML = `schema_version: 1
acknowledgements:
  - rule: psp
    reason: the legacy tenant moves in January
    accepted_by: jane@example.com
    expires: 2105-12-31
`

// TestWeeklyMailPerTeam delivers one week as the service does with an owners file and an
// acknowledgements file: mailpit receives one mail for --mail-to with every caller, and one
// per team with exactly its callers (the CSV attachment's rows, and the text part); the
// accepted PSP blocker is listed apart, not among the blockers.
func TestWeeklyMailPerTeam(t *testing.T) {
	_, st := chtest.ServerStore(t)
	mp, err := mailpittest.Start(t.TempDir(), mailpittest.Options{})
	if err != nil {
		enginetest.Unavailable(t, "mailpit", err)
	}
	t.Cleanup(mp.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	week := weekly.LastWeekEnding(testkit.Now().UTC())
	start := week.AddDate(0, 0, -6)
	var fs []*auditlensv1.Finding
	add := func(id, user, ua, ns string, rule, resource, removed string) {
		fs = append(fs, &auditlensv1.Finding{RuleId: rule, Cluster: "prod", AuditId: id, EventTime: timestamppb.New(start.Add(time.Duration(len(fs)) * time.Hour)),
			ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: resource, RemovedIn: removed, Username: user, UserAgent: ua, Namespace: ns})
	}
	add("w1", "system:serviceaccount:web:deployer", "helm/3.2", "web", "removed-api", "ingresses", "1.22")
	add("w2", "alice", "kubectl/v1.20.0", "web", "removed-api", "ingresses", "1.22")
	add("d1", "system:serviceaccount:kafka:op", "spark-operator/3.1", "kafka", "removed-api", "ingresses", "1.22")
	add("d2", "system:serviceaccount:kafka:op", "spark-operator/3.1", "kafka", "removed-api", "daemonsets", "1.16")
	add("u1", "bob", "curl/8", "default", "removed-api", "daemonsets", "1.16")
	add("p1", "system:serviceaccount:web:deployer", "helm/3.2", "web", "psp", "podsecuritypolicies", "1.25")
	if err := st.WriteFindings(ctx, fs); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	fc := DefaultFilesConfig()
	fc.Owners.Path, fc.Acks.Path = filepath.Join(dir, "owners.yaml"), filepath.Join(dir, "acks.yaml")
	for p, s := range map[string]string{fc.Owners.Path: ownersYAML, fc.Acks.Path: acksYAML} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := OpenFiles(fc, kubeclient.Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mc := mail.Config{Addr: mp.SMTPAddr, StartTLS: mail.TLSOff, From: "auditlens@example.com",
		To: flagenv.StringList{"platform@example.com"}, Timeout: 10 * time.Second}
	snd, err := mail.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	d := &schedule.Delivery{DB: st.DB(), Ledger: weekly.Ledger{DB: st.DB(), Ins: st}, Sender: snd, Recipients: mc.To,
		Options: weekly.Options{Cluster: "prod", Target: weekly.Version{Major: 1, Minor: 25}}}
	files.Weekly(d)
	var told []string // what report weekly --send prints: every mail, the teams' too
	d.OnSent = func(team string, to []string) { told = append(told, team+":"+strings.Join(to, ",")) }
	if out, err := d.Deliver(ctx, week, false); err != nil || out != schedule.Sent {
		t.Fatalf("deliver: %s, %v", out, err)
	}
	slices.Sort(told)
	if want := []string{"data:data@example.com,data-lead@example.com", "platform:platform@example.com", "web:web@example.com"}; !slices.Equal(told, want) {
		t.Errorf("mails told of: %q, want %q", told, want)
	}
	list, err := mp.WaitMessages(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"platform@example.com":                   {"alice", "bob", "system:serviceaccount:kafka:op", "system:serviceaccount:web:deployer"},
		"web@example.com":                        {"alice", "system:serviceaccount:web:deployer"},
		"data-lead@example.com,data@example.com": {"system:serviceaccount:kafka:op"},
	}
	got := map[string][]string{}
	for _, s := range list {
		m, err := mp.Message(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		var to []string
		for _, a := range m.To {
			to = append(to, a.Address)
		}
		slices.Sort(to)
		key := strings.Join(to, ",")
		if len(m.Attachments) != 1 {
			t.Fatalf("%s: %d attachments", key, len(m.Attachments))
		}
		b, err := mp.Part(ctx, m.ID, m.Attachments[0].PartID)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var users []string
		for _, r := range rows[1:] {
			if r[3] == "psp" {
				t.Errorf("%s: the accepted PSP blocker is among the blocker rows: %v", key, r)
			}
			if !slices.Contains(users, r[9]) {
				users = append(users, r[9])
			}
		}
		slices.Sort(users)
		got[key] = users
		if key == "platform@example.com" || key == "web@example.com" {
			if !strings.Contains(m.Text, "ACCEPTED RISKS (not blocking)") || !strings.Contains(m.Text, "accepted until 2105-12-31 by jane@example.com") {
				t.Errorf("%s: the text part does not list the accepted PSP blocker:\n%s", key, m.Text)
			}
		}
		for _, u := range []string{"bob", "alice", "system:serviceaccount:kafka:op"} {
			if !slices.Contains(want[key], u) && strings.Contains(m.Text, u) {
				t.Errorf("%s: the text part names %s, who is not theirs", key, u)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("callers per mail:\n got %v\nwant %v", got, want)
	}
}
