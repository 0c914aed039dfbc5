package kubetest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/auditlens/auditlens/deploy/kubetest/kubeapiserver"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/access"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/page"
	"github.com/auditlens/auditlens/services/report/readiness"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// TestFailingNowApartOnARealAPIServer: a real kube-apiserver 1.37 serving
// resource.k8s.io/v1beta1 (which 1.38 removes) writes the audit log of its own requests (as
// system:apiserver, kube-apiserver/v1.37.2: built with Kubernetes' version stamp), a controller
// manager that names the same release, a caller of that API (200) and
// callers of APIs removed in 1.22, 1.25 and 1.32 (404). The pipeline (ingest, classify,
// report on ClickHouse 18.16) learns the cluster runs 1.37 from classify's heartbeats; then
// classify scan, the readiness gate, the weekly report and the console's first screen all say
// the same for the default target 1.38: one blocker new in 1.38 first, three failing already
// after it, counted apart. Then the caller of v1beta1 calls resource.k8s.io/v1: it is migrated
// and the gate (the failing ones accepted) is ready within a minute; its next v1beta1 write
// blocks again.
func TestFailingNowApartOnARealAPIServer(t *testing.T) {
	ch := chtest.StartServer(t)
	dir := t.TempDir()
	bins := buildServices(t, dir)
	auditLog := filepath.Join(dir, "audit", "audit.log")
	if err := os.MkdirAll(filepath.Dir(auditLog), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auditLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr := freeAddr(t)
	common := []string{"--cluster", "upgrade", "--log-format", "json"}
	remote := append([]string{"--nats-url", "nats://" + natsAddr, "--metrics-addr", ""}, common...)
	run(t, dir, bins, "ingest", append([]string{"--nats-url", "embedded", "--nats-store-dir", filepath.Join(dir, "nats"),
		"--nats-embedded-listen", natsAddr, "--metrics-addr", "", "--audit-log", auditLog,
		"--checkpoint-dir", filepath.Join(dir, "checkpoints"), "--audit-log-poll-interval", "50ms"}, common...)...)
	waitFor(t, 60*time.Second, "ingest's NATS", func() bool { return dial(natsAddr) })
	run(t, dir, bins, "classify", append([]string{"--classify-heartbeat-interval", "1s"}, remote...)...)
	run(t, dir, bins, "report", append([]string{"--clickhouse-dsn", ch.DSN("auditlens"), "--report-batch-size", "50",
		"--report-batch-max-wait", "100ms", "--report-console-addr="}, remote...)...)

	const cmToken = "upgrade-test-controller-manager-token"
	s := kubeapiserver.Start(t, kubeapiserver.Options{AuditPolicy: "../audit-policy.yaml", AuditLog: auditLog,
		Tokens: []string{cmToken + ",system:kube-controller-manager,cm-uid"},
		Args:   []string{"--runtime-config=resource.k8s.io/v1beta1=true"}})
	ctx := context.Background()
	get := func(token, agent, path string, want int) {
		t.Helper()
		cfg := s.Config(rest.NoWarnings{})
		cfg.UserAgent = agent
		if token != "" {
			cfg.BearerToken = token
		}
		var code int
		kubernetes.NewForConfigOrDie(cfg).RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code)
		if code != want {
			t.Fatalf("GET %s as %s: %d, want %d", path, agent, code, want)
		}
	}
	// The controller manager names the cluster's release (the apiserver built here names
	// v0.0.0, which is believed by nobody).
	get(cmToken, "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/5f0ab2c/system:kube-controller-manager", "/api/v1/namespaces", http.StatusOK)
	get("", "dra-driver/v0.4.0", "/apis/resource.k8s.io/v1beta1/deviceclasses", http.StatusOK)
	get("", "old-ci/1.0", "/apis/extensions/v1beta1/namespaces/default/ingresses", http.StatusNotFound)
	get("", "old-ci/1.0", "/apis/policy/v1beta1/podsecuritypolicies", http.StatusNotFound)
	get("", "old-ci/1.0", "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas", http.StatusNotFound)

	// classify scan on the apiserver's log: the release read from the agent, the target the
	// release after it.
	out, err := exec.Command(bins["classify"], "scan", "--format", "wide", auditLog).CombinedOutput()
	if code := exitCode(err); code != 3 {
		t.Fatalf("classify scan: exit %d (%v)\n%s", code, err, out)
	}
	for _, want := range []string{
		"blocking an upgrade from 1.37 to 1.38 (1 new in 1.38, 3 failing now)",
		"Breaks on the upgrade to 1.38 (removed after 1.37, the cluster's release, at or before 1.38): 1 blocker, 1 finding\n" +
			"  resource.k8s.io/v1beta1 deviceclasses (removed-api)",
		"Failing now (removed at or before 1.37, the cluster's release: these callers fail today, a removed API with 404): 3 blockers, 3 findings",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("classify scan lacks %q:\n%s", want, out)
		}
	}

	db, err := sql.Open("clickhouse", ch.DSN("auditlens"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The live apiserver stamps its events with the wall clock, so the judgement's window ends
	// at the wall clock (its 7 days hold requests made a moment ago whatever the date; the
	// test clock, testkit.Now, may be set to another day for the date-sensitive suites).
	target := kubeversion.MustParse("1.38")
	var g *readiness.Result
	waitFor(t, 120*time.Second, "the gate to see the four blockers and the release", func() bool {
		g, err = readiness.Evaluate(ctx, db, readiness.Options{Cluster: "upgrade", Target: target, Now: time.Now})
		return err == nil && len(g.Blockers) == 4 && g.Current.String() == "1.37"
	})
	wantOrder := "+resource.k8s.io/v1beta1 deviceclasses"
	if got := order(g.Blockers); !strings.HasPrefix(got, wantOrder) || g.NewBlockers != 1 || g.FailingNow != 3 ||
		!strings.Contains(g.CurrentWhy, "the kube-apiserver's user agent") {
		t.Errorf("gate: %s (new %d, failing %d, release %s from %q)", got, g.NewBlockers, g.FailingNow, g.Current, g.CurrentWhy)
	}
	if !strings.Contains(g.Message, "1 removed after 1.37, the cluster's release: resource.k8s.io/v1beta1 deviceclasses; 3 failing now") {
		t.Errorf("gate message: %s", g.Message)
	}
	// What the verdict rests on, from ingest's input header through classify's heartbeats: the
	// file input, and (with the shipped audit policy) the writes that request-body rules read
	// logged with their bodies, so nothing is left unchecked.
	waitFor(t, 60*time.Second, "the gate's coverage", func() bool {
		g, err = readiness.Evaluate(ctx, db, readiness.Options{Cluster: "upgrade", Target: target, Now: time.Now})
		return err == nil && g.Coverage.Known && g.Coverage.Bodies == "seen"
	})
	if strings.Join(g.Coverage.Inputs, ",") != "file" || !slices.Contains(g.Coverage.Levels, "Metadata") || g.Unchecked != "" || strings.Contains(g.Message, "not checked") {
		t.Errorf("gate coverage %+v, not checked %q", g.Coverage, g.Unchecked)
	}

	// The week of the requests themselves (their newest use, stamped by the apiserver), not of
	// a clock read after them: the test may run across a week's end.
	week := weekly.Date{Time: weekly.LastWeekEnding(g.Blockers[0].LastSeen).AddDate(0, 0, 7)}
	rep, err := weekly.Build(ctx, db, weekly.Options{Cluster: "upgrade", Target: target, WeekEnding: week, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got := order(rep.Blockers); got != order(g.Blockers) {
		t.Errorf("weekly report %s, gate %s", got, order(g.Blockers))
	}
	var text bytes.Buffer
	if err := render.Text(&text, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{": 1 upgrade blocker for 1.38, 3 failing now", "BREAKS ON THE UPGRADE TO 1.38 (removed after 1.37): 1",
		"FAILING NOW (removed at or before 1.37"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("weekly mail lacks %q:\n%s", want, text.String())
		}
	}

	// The console's first screen, its default target the release after the cluster's.
	h := &page.Handler{DB: db, Cluster: "upgrade", Releases: []weekly.Version{kubeversion.MustParse("1.37"), target},
		Log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(access.Loopback(mux))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	index := body.String()
	for _, want := range []string{
		`<span class="blocker-count">4</span> blockers for 1.38 (<span class="new-count">1</span> new, <span class="failing-count">3</span> failing now)`,
		"Target 1.38: the release after 1.37, the cluster&#39;s.",
		"Breaks on the upgrade to 1.38 (removed after 1.37): 1",
	} {
		if !strings.Contains(index, want) {
			t.Errorf("console: %q not in\n%.5000s", want, index)
		}
	}
	if i, j := strings.Index(index, "deviceclasses"), strings.Index(index, "ingresses"); i < 0 || j < i {
		t.Errorf("console: the 1.38 removal is not first (%d, %d)", i, j)
	}

	// Fixed at once: the DRA driver moves to resource.k8s.io/v1. With the three removals that
	// fail already accepted as known risks, the gate for 1.38 turns ready as soon as the
	// move reaches it (classify's next heartbeat), not when the v1beta1 call leaves the window.
	time.Sleep(1100 * time.Millisecond) // a call of the replacement in a later second than the old one
	get("", "dra-driver/v0.4.0", "/apis/resource.k8s.io/v1/deviceclasses", http.StatusOK)
	moved := time.Now() // a duration against the live apiserver's wall clock, not a date: the test clock is not it
	judge := func() bool {
		g, err = readiness.Evaluate(ctx, db, readiness.Options{Cluster: "upgrade", Target: target, Now: time.Now, Acceptor: acceptBefore(target)})
		return err == nil
	}
	waitFor(t, time.Minute, "the gate ready once the driver moved", func() bool { return judge() && g.Ready })
	t.Logf("ready %s after the driver's call of resource.k8s.io/v1", time.Since(moved).Round(100*time.Millisecond))
	if g.MigratedCount != 1 || g.Migrated[0].UserAgent != "dra-driver/v0.4.0" || g.Migrated[0].API() != "resource.k8s.io/v1beta1 deviceclasses" ||
		len(g.Accepted) != 3 || !strings.Contains(g.Message, "1 caller(s) moved to the replacement") {
		t.Errorf("gate after the move: migrated %+v, %d accepted: %s", g.Migrated, len(g.Accepted), g.Message)
	}
	// A later write with v1beta1 blocks again (a read of it minutes after its v1 read would be
	// a reader's of every version: an enumerator-read).
	time.Sleep(1100 * time.Millisecond)
	cfg := s.Config(rest.NoWarnings{})
	cfg.UserAgent = "dra-driver/v0.4.0"
	var code int
	kubernetes.NewForConfigOrDie(cfg).RESTClient().Post().AbsPath("/apis/resource.k8s.io/v1beta1/deviceclasses").
		Body([]byte(`{"apiVersion":"resource.k8s.io/v1beta1","kind":"DeviceClass","metadata":{"name":"gpu"}}`)).
		SetHeader("Content-Type", "application/json").Do(ctx).StatusCode(&code)
	if code != http.StatusCreated {
		t.Fatalf("create a v1beta1 DeviceClass: %d", code)
	}
	waitFor(t, time.Minute, "the gate blocked again", func() bool { return judge() && len(g.Blockers) == 1 })
	if g.Ready || g.MigratedCount != 0 || order(g.Blockers) != "+resource.k8s.io/v1beta1 deviceclasses " {
		t.Errorf("gate after the driver went back: ready %v, migrated %d, blockers %s", g.Ready, g.MigratedCount, order(g.Blockers))
	}
}

// acceptBefore accepts, without expiry, every blocker removed before target: known risks.
type acceptBefore weekly.Version

func (a acceptBefore) Accept(b weekly.Blocker) (weekly.Acceptance, bool) {
	v, err := kubeversion.Parse(b.RemovedIn)
	if err != nil || !v.Less(weekly.Version(a)) {
		return weekly.Acceptance{}, false
	}
	return weekly.Acceptance{By: "the test", Reason: "fails already", Source: "upgrade_test.go"}, true
}

// order is the blockers as "+api" (breaks on the upgrade) or "!api" (failing now), in order.
func order(bs []weekly.Blocker) string {
	var b strings.Builder
	for _, x := range bs {
		mark := "+"
		if x.FailingNow {
			mark = "!"
		}
		b.WriteString(mark + x.API() + " ")
	}
	return b.String()
}

// exitCode is the exit status of a command's error (0 for nil, -1 when it did not run).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
