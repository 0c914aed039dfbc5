package page

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/console"
)

const hostile = `<script>alert(1)</script>"'`

func TestReportPage(t *testing.T) {
	_, st := chtest.ServerStore(t)
	at := consoleNow.AddDate(0, 0, -7).Add(-5 * time.Hour) // the Wednesday before, 10:00
	var fs []*auditlensv1.Finding
	for i, agent := range []string{hostile, "kubectl/v1.21.0 (linux/amd64)", hostile} {
		fs = append(fs, &auditlensv1.Finding{
			RuleId: "removed-api", Cluster: "default", AuditId: []string{"a", "b", "c"}[i], EventTime: timestamppb.New(at),
			ApiGroup: "extensions", ApiVersion: "v1beta1", Resource: "ingresses", Verb: "list",
			Username: "system:serviceaccount:ci:" + hostile, UserAgent: agent, RemovedIn: "1.22", DeprecatedIn: "1.14",
		})
	}
	// Delivered twice: still three findings.
	for range 2 {
		if err := st.WriteFindings(context.Background(), fs); err != nil {
			t.Fatal(err)
		}
	}
	h := &Handler{DB: st.DB(), Cluster: "default", Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return consoleNow.AddDate(0, 0, -2).Add(-7 * time.Hour) }, Limits: testLimits} // Monday 08:00
	srv := httptest.NewServer(access.Loopback(h))
	defer srv.Close()
	get := func(q string) (*http.Response, string) {
		resp, err := http.Get(srv.URL + "/report?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, body := get("target-version=1.33")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("html: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatal("hostile user agent not escaped in the page")
	}
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatal("no content security policy")
	}
	if !strings.Contains(body, "data:image/png;base64,") {
		t.Fatal("charts not embedded")
	}

	resp, body = get("format=json&week-ending=" + day(-3) + "&target-version=1.33")
	var rep struct {
		Totals struct{ Findings, Blocking int }
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &rep) != nil || rep.Totals.Findings != 3 || rep.Totals.Blocking != 3 {
		t.Fatalf("json: %d %+v %.300s", resp.StatusCode, rep.Totals, body)
	}
	_, body = get("format=json&week-ending=" + day(-3) + "&target-version=1.21")
	if json.Unmarshal([]byte(body), &rep) != nil || rep.Totals.Blocking != 0 {
		t.Fatalf("removed in 1.22 must not block 1.21: %+v", rep.Totals)
	}

	// Absurd but well-formed values are bad requests too, not a failure of the service.
	for _, q := range []string{"format=pdf", "target-version=latest", "week-ending=tuesday", "week-ending=0001-01-01",
		"week-ending=9999-12-26", "week-ending=1969-12-28", "target-version=1.1000", "target-version=0.9"} {
		if resp, body := get(q); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, strings.Split(q, "=")[0]) {
			t.Errorf("%s: %d %q", q, resp.StatusCode, body)
		}
	}
}

// TestFleetLine: the version spread reads per component, releases with their callers.
func TestFleetLine(t *testing.T) {
	v := kubeversion.MustParse
	got := fleetLine([]console.FleetRelease{
		{Component: "kube-proxy", Release: v("1.34"), Callers: 3},
		{Component: "kubelet", Release: v("1.33"), Callers: 1},
		{Component: "kubelet", Release: v("1.37"), Callers: 12},
	})
	if want := "kube-proxy 1.34 (3) · kubelet 1.33 (1), 1.37 (12)"; got != want {
		t.Errorf("fleet line %q, want %q", got, want)
	}
	if fleetLine(nil) != "" {
		t.Error("no sighting: a line")
	}
	fs := []console.FleetRelease{
		{Component: "kubectl", Release: v("1.38"), Callers: 4},
		{Component: "kubelet", Release: v("1.37"), Callers: 12},
		{Component: "kubelet", Release: v("1.38"), Callers: 2},
	}
	if got := newerThan(fs, v("1.37")); got != "kubelet 1.38 (2)" {
		t.Errorf("newer than 1.37: %q, want the two kubelets 1.38 (kubectl may be one release ahead)", got)
	}
	if got := newerThan(fs, kubeversion.Version{}); got != "" {
		t.Errorf("newer than an unknown release: %q", got)
	}
}
