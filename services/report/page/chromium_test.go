package page

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/auditevent"
	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
)

var update = flag.Bool("update", false, "rewrite docs/console.png, the console's first screen, from the browser test")

// corpusDir holds genuine kube-apiserver audit events (a copy of shared/testdata/real-world).
const corpusDir = "../../../lib/auditevent/testdata/real-world"

// screenshot is the console's first screen shown in the README.
const screenshot = "../../../docs/console.png"

// realFinding is one finding classify makes of a line of the corpus (its golden file,
// services/classify/rules/testdata/corpus-findings.golden), with the catalogue's releases.
type realFinding struct {
	file                               string
	line                               int
	rule, deprecated, removed, instead string
}

var realFindings = []realFinding{
	{"k8s-perf-tests-gce-scale.jsonl", 1, "removed-api", "1.19", "1.22", "coordination.k8s.io/v1"},
	{"k8s-perf-tests-gce-scale.jsonl", 2, "removed-api", "1.19", "1.22", "coordination.k8s.io/v1"},
	{"kubeadm-1.14.6-audit-blog-zh.jsonl", 1, "removed-api", "1.19", "1.22", "storage.k8s.io/v1"},
	{"openshift-cluster-logging-operator-testdata.jsonl", 1, "legacy-sa-token", "", "", ""},
	{"openshift-cluster-logging-operator-testdata.jsonl", 2, "legacy-sa-token", "", "", ""},
	{"openshift-cluster-logging-operator-testdata.jsonl", 3, "legacy-sa-token", "", "", ""},
	{"openshift-cluster-logging-operator-testdata.jsonl", 8, "legacy-sa-token", "", "", ""},
	{"openshift-cluster-logging-operator-testdata.jsonl", 9, "legacy-sa-token", "", "", ""},
	{"openshift-cluster-logging-operator-testdata.jsonl", 10, "legacy-sa-token", "", "", ""},
}

// corpusFindings decodes the events of realFindings and makes their findings for cluster,
// moved to this week (the i-th an hour before the one before it, from at) as if the cluster
// had just been pointed at auditlens.
func corpusFindings(t *testing.T, cluster string, at time.Time) []*auditlensv1.Finding {
	t.Helper()
	d := auditevent.NewDecoder(0)
	var out []*auditlensv1.Finding
	for i, rf := range realFindings {
		ev, err := d.DecodeEvent(corpusLine(t, rf.file, rf.line))
		if err != nil {
			t.Fatalf("%s:%d: %v", rf.file, rf.line, err)
		}
		f := &auditlensv1.Finding{RuleId: rf.rule, Cluster: cluster, AuditId: ev.AuditID,
			EventTime: timestamppb.New(at.Add(-time.Duration(i) * time.Hour)), Verb: ev.Verb, RequestUri: ev.RequestURI,
			Username: ev.User.Username, UserAgent: ev.UserAgent, DeprecatedIn: rf.deprecated, RemovedIn: rf.removed,
			Replacement: rf.instead, Stage: ev.Stage}
		if len(ev.SourceIPs) > 0 {
			f.SourceIp = ev.SourceIPs[0]
		}
		if r := ev.ObjectRef; r != nil {
			f.ApiGroup, f.ApiVersion, f.Resource, f.Namespace, f.Name = r.APIGroup, r.APIVersion, r.Resource, r.Namespace, r.Name
		}
		if ev.ResponseStatus != nil {
			f.ResponseCode = ev.ResponseStatus.Code
		}
		out = append(out, f)
	}
	return out
}

func corpusLine(t *testing.T, file string, line int) []byte {
	t.Helper()
	fh, err := os.Open(filepath.Join(corpusDir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		if n == line {
			return append([]byte(nil), sc.Bytes()...)
		}
	}
	t.Fatalf("%s has no line %d", file, line)
	return nil
}

// hostileJS would, if a page let it through, run a script (setting the title to "pwned" and
// window.pwned) or an event handler; it ends in control characters and a bidi override.
const hostileJS = `<script>document.title="pwned";window.pwned=1</script><img src=x onerror="window.pwned=2">"'&` + "\x1b[31m\u202e\x00"

// hostileFindings are three requests of one caller on the corpus's leases blocker with
// attacker-written text in every field, very long in some.
func hostileFindings(cluster string, at time.Time) []*auditlensv1.Finding {
	long := hostileJS + strings.Repeat("A", 3000)
	var fs []*auditlensv1.Finding
	for i := range 3 {
		fs = append(fs, &auditlensv1.Finding{RuleId: "removed-api", Cluster: cluster, AuditId: "evil-" + string(rune('a'+i)) + hostileJS,
			EventTime: timestamppb.New(at.Add(-time.Duration(i) * time.Minute)), Verb: "update" + hostileJS,
			RequestUri: "/apis/coordination.k8s.io/v1beta1/namespaces/x/leases/" + long, ApiGroup: "coordination.k8s.io",
			ApiVersion: "v1beta1", Resource: "leases", Namespace: hostileJS, Name: long, Username: "system:serviceaccount:" + hostileJS,
			UserAgent: long, SourceIp: hostileJS, ResponseCode: 200, DeprecatedIn: "1.19", RemovedIn: "1.22",
			Replacement: hostileJS, Message: long})
	}
	return fs
}

// TestConsoleInChromium clicks through the console in headless chromium, from / to one
// request and through the search, on real audit events' findings and hostile ones, and
// checks at every page that hostile text shows as text and no script or handler from the
// data exists or ran. The first screen's screenshot goes to docs/console.png with -update,
// else to a temporary directory.
func TestConsoleInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}
	st := chtest.EmbeddedStore(t)
	write := func(fs []*auditlensv1.Finding) {
		if err := st.WriteFindings(context.Background(), fs); err != nil {
			t.Fatal(err)
		}
	}
	write(append(corpusFindings(t, "prod", consoleNow.Add(-time.Hour)), hostileFindings("prod", consoleNow.Add(-10*time.Minute))...))
	srv := consoleServer(t, st)

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.WindowSize(1100, 560))
	defer acancel()
	b, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	dialogs := watchDialogs(t, b)
	if err := chromedp.Do(b, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("clusters"))); err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}
	br := browser{t: t, ctx: b, dialogs: dialogs}

	br.safe("/")
	// The first screen for 1.22 (the screenshot): the corpus's blockers with their callers.
	br.do(chromedp.Navigate(srv.URL+"/?target-version=1.22"), chromedp.WaitVisible(chromedp.ID("clusters")))
	br.wantText(`[...document.querySelectorAll("table.blockers tr.blocker td:nth-child(2)")].map(td => td.textContent).sort()`,
		"coordination.k8s.io/v1beta1 leases", "storage.k8s.io/v1beta1 csidrivers")
	// The top callers' column is wide enough for a user agent on one or two lines (it once
	// broke agents every 10-12 characters while "Use instead" took the width).
	br.wantText(`[...document.querySelectorAll("table.blockers tr.blocker td:nth-child(8)")].map(td => td.getBoundingClientRect().width >= 300 ? "wide" : "narrow " + td.getBoundingClientRect().width)`,
		"wide", "wide")
	br.wantText(`[...document.querySelectorAll("ul.top-callers .ua")].filter(s => s.textContent.startsWith("kubelet/")).map(s => s.getClientRects().length <= 2 ? "kept" : "broken into " + s.getClientRects().length)`,
		"kept", "kept", "kept")
	shot := br.run(chromedp.CaptureScreenshot())
	out := filepath.Join(dir, "console.png")
	if *update {
		out = screenshot
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)

	// A hostile cluster name on the index is text.
	write([]*auditlensv1.Finding{{RuleId: "psp", Cluster: hostileJS, AuditId: "x", EventTime: timestamppb.New(consoleNow), RemovedIn: "1.25"}})
	br.do(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("clusters")))
	br.safe("/ with a hostile cluster")
	br.wantText(`[...document.querySelectorAll("a.report-link")].map(a => a.textContent)`, printable.String(hostileJS), "prod")

	// The target form, then the cluster's report.
	br.do(chromedp.SetValue(chromedp.CSS(`#target-form select`), "1.22"), chromedp.Click(chromedp.CSS(`#target-form button`)),
		chromedp.WaitReady(chromedp.CSS(`#target-form option[value="1.22"][selected]`)))
	br.safe("/?target-version=1.22")
	// The first screen for 1.22: the corpus's blockers with their busiest callers.
	br.wantText(`[...document.querySelectorAll("table.blockers tr.blocker td:nth-child(2)")].map(td => td.textContent).sort()`,
		"coordination.k8s.io/v1beta1 leases", "storage.k8s.io/v1beta1 csidrivers")
	br.do(chromedp.Click(chromedp.CSS(`a.report-link[href*="cluster=prod&"]`)), chromedp.WaitVisible(chromedp.ID("controls")))
	br.safe("/report")
	br.wantText(`[document.getElementById("week-note").textContent]`, "Showing this week so far: the last full week has no findings.")

	// The report's form: target 1.25; two blockers (leases, csidrivers), then the leases' callers.
	br.do(chromedp.SetValue(chromedp.CSS(`#controls select[name="target-version"]`), "1.25"), chromedp.Click(chromedp.CSS(`#controls button`)),
		chromedp.WaitReady(chromedp.CSS(`#controls select[name="target-version"] option[value="1.25"][selected]`)))
	br.safe("/report?target-version=1.25")
	br.wantText(`[...document.querySelectorAll("#blockers tr.blocker td:nth-child(2)")].map(td => td.textContent)`,
		"coordination.k8s.io/v1beta1 leases", "storage.k8s.io/v1beta1 csidrivers")
	br.do(chromedp.Click(chromedp.CSS(`a.callers-link[href*="resource=leases"]`)), chromedp.WaitVisible(chromedp.ID("callers")))
	br.safe("/callers")
	long := printable.Truncate(hostileJS+strings.Repeat("A", 3000), maxShown)
	br.wantText(`[...document.querySelectorAll("#callers tr.caller td:nth-child(2)")].map(td => td.textContent)`,
		long, "kubelet/v1.14.0 (linux/amd64) kubernetes/aef1179", "kubelet/v1.14.0 (linux/amd64) kubernetes/aef1179")

	// The hostile caller (the busiest) has three requests; the newest is one click away.
	br.do(chromedp.Click(chromedp.CSS(`#callers tbody tr:first-child a.requests-link`)), chromedp.WaitVisible(chromedp.ID("requests")))
	br.safe("/requests")
	br.wantText(`[...document.querySelectorAll("#requests tr.request td:nth-child(2)")].map(td => td.textContent)`,
		printable.String("update"+hostileJS), printable.String("update"+hostileJS), printable.String("update"+hostileJS))
	br.do(chromedp.Click(chromedp.CSS(`#requests tbody tr:first-child a.request-link`)), chromedp.WaitVisible(chromedp.ID("audit-id")))
	br.safe("/request")
	br.wantText(`[document.getElementById("audit-id").textContent]`, printable.String("evil-a"+hostileJS))
	br.wantText(`[...document.querySelectorAll("dd.ua span")].map(s => s.title)`, printable.String(hostileJS+strings.Repeat("A", 3000)))

	// Back to the index by the crumbs, then the search form: by user agent, then one caller's requests.
	br.do(chromedp.Click(chromedp.CSS(`#crumbs a:first-child`)), chromedp.WaitVisible(chromedp.ID("clusters")))
	br.do(chromedp.SetValue(chromedp.CSS(`#search-form select[name="cluster"]`), "prod"),
		chromedp.SetValue(chromedp.CSS(`#search-form select[name="by"]`), "agent"),
		chromedp.SetValue(chromedp.CSS(`#search-form input[name="q"]`), "<SCRIPT>"),
		chromedp.Click(chromedp.CSS(`#search-form button`)), chromedp.WaitVisible(chromedp.ID("matches")))
	br.safe("/search")
	br.wantText(`[...document.querySelectorAll("#matches tr.match td:nth-child(5)")].map(td => td.textContent)`, long)
	br.do(chromedp.Click(chromedp.CSS(`#matches tbody tr:first-child a.requests-link`)), chromedp.WaitVisible(chromedp.ID("requests")))
	br.safe("/requests from the search")
}

// browser drives one tab for a test.
type browser struct {
	t       *testing.T
	ctx     context.Context
	dialogs func() []string
}

func (br browser) do(steps ...chromedp.Action[chromedp.Void]) {
	br.t.Helper()
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		br.t.Fatal(err)
	}
}

func (br browser) run(a chromedp.Action[[]byte]) []byte {
	br.t.Helper()
	v, err := chromedp.Run(br.ctx, a)
	if err != nil {
		br.t.Fatal(err)
	}
	return v
}

func (br browser) eval(js string) string {
	br.t.Helper()
	v, err := chromedp.Run(br.ctx, chromedp.Evaluate[json.RawMessage](js))
	if err != nil {
		br.t.Fatalf("%s: %v", js, err)
	}
	return string(v)
}

// wantText checks that js, an array of strings, is want.
func (br browser) wantText(js string, want ...string) {
	br.t.Helper()
	var got []string
	if err := json.Unmarshal([]byte(br.eval(js)), &got); err != nil {
		br.t.Fatalf("%s: %v", js, err)
	}
	if !slices.Equal(got, want) {
		br.t.Errorf("%s:\n got %.600q\nwant %.600q", js, got, want)
	}
}

// safe checks the page: no script element or event handler attribute in the DOM, no
// script from the data ran (window.pwned, the title, dialogs).
func (br browser) safe(page string) {
	br.t.Helper()
	if got := br.eval(`document.querySelectorAll("script").length`); got != "0" {
		br.t.Errorf("%s: %s script elements", page, got)
	}
	if got := br.eval(`[...document.querySelectorAll("*")].filter(e => [...e.attributes].some(a => a.name.startsWith("on"))).length`); got != "0" {
		br.t.Errorf("%s: %s elements with event handlers", page, got)
	}
	if got := br.eval(`[typeof window.pwned, document.title === "pwned"]`); got != `["undefined",false]` {
		br.t.Errorf("%s: a script from the data ran: %s", page, got)
	}
	if d := br.dialogs(); len(d) > 0 {
		br.t.Errorf("%s: dialogs opened: %q", page, d)
	}
}

// watchDialogs records (and closes) every JavaScript dialog the tab opens.
func watchDialogs(t *testing.T, ctx context.Context) func() []string {
	var mu sync.Mutex
	var seen []string
	opened := make(chan string, 16)
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			select {
			case opened <- d.Message:
			default:
			}
		}
	}); err != nil {
		enginetest.Unavailable(t, "chromium", err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-opened:
				mu.Lock()
				seen = append(seen, m)
				mu.Unlock()
				_, _ = chromedp.Call(ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: true})
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}
