package page

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/acks"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/owners"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// TestReportByTeamAndAccepted: /report?team=NAME shows only that team's callers (an unknown
// team is a 400 naming the parameter), and a blocker an acknowledgement accepts is listed
// apart, "until" its day, not among the blockers.
func TestReportByTeamAndAccepted(t *testing.T) {
	_, st := chtest.ServerStore(t)
	seedConsole(t, st)
	own, err := owners.Parse("owners.yaml", []byte("schema_version: 1\nteams:\n  - name: web\n    email: [web@example.com]\n    namespaces: [web]\n"))
	if err != nil {
		t.Fatal(err)
	}
	set, err := acks.Parse("acks.yaml", []byte("schema_version: 1\nacknowledgements:\n  - api: extensions/v1beta1 ingresses\n    reason: migrating\n    accepted_by: web@example.com\n    expires: "+day(22)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	accept := false
	h := &Handler{DB: st.DB(), Cluster: "prod", DefaultTarget: weekly.Version{Major: 1, Minor: 33}, Log: slog.New(slog.DiscardHandler),
		Now:    func() time.Time { return consoleNow },
		Limits: testLimits,
		Owners: func() TeamFilter { return own },
		Accept: func(cluster string) weekly.Acceptor {
			if !accept {
				return nil
			}
			return set.For(cluster)
		}}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	defer srv.Close()
	week := "/report?cluster=prod&week-ending=" + day(4) + "&format=text"

	_, all := fetch(t, http.MethodGet, srv.URL+week)
	if !strings.Contains(all, "bob") || !strings.Contains(all, "system:serviceaccount:ci:") {
		t.Fatalf("the whole report lacks a caller:\n%s", all)
	}
	resp, web := fetch(t, http.MethodGet, srv.URL+week+"&team=web")
	if resp.StatusCode != http.StatusOK || !strings.Contains(web, "bob") || strings.Contains(web, "system:serviceaccount:ci:") {
		t.Errorf("team web: %d, want bob only:\n%s", resp.StatusCode, web)
	}
	// The HTML form offers the teams, the chosen one selected, and its format links keep it.
	_, page := fetch(t, http.MethodGet, srv.URL+"/report?cluster=prod&week-ending="+day(4)+"&team=web")
	if !strings.Contains(page, `<select name="team"><option value="">all callers</option><option value="web" selected>web</option></select>`) ||
		!strings.Contains(page, "format=csv&amp;target-version=1.33&amp;team=web") {
		t.Errorf("the form has no team selector with web selected, or the format links lose the team")
	}
	resp, body := fetch(t, http.MethodGet, srv.URL+week+"&team=nobody")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "team") {
		t.Errorf("unknown team: %d %s", resp.StatusCode, body)
	}

	accept = true
	_, body = fetch(t, http.MethodGet, srv.URL+week)
	if !strings.Contains(body, "ACCEPTED RISKS (not blocking)") || !strings.Contains(body, "accepted until "+day(22)+" by web@example.com: migrating (acks.yaml:3)") ||
		!strings.Contains(body, "none: nothing seen this week is removed") {
		t.Errorf("accepted ingresses not listed apart:\n%s", body)
	}
}
