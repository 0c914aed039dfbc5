package e2e

import (
	"bufio"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/testkit"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/engine"
)

// TestFirstHour runs the all-in-one as `make run` does (embedded NATS and ClickHouse, the
// genuine events of examples/audit.log): once ready it logs the console's URL, and from that
// page links alone lead to a blocker's callers, a caller's requests and one request.
func TestFirstHour(t *testing.T) {
	if err := chdb.Available(); err != nil {
		enginetest.Unavailable(t, "chdb", err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	p := start(t, dir, "auditlens", "--data-root", filepath.Join(dir, "data"), "--audit-log", "../../../examples/audit.log",
		"--retention-days", "0", "--metrics-addr", freeAddr(t), "--report-console-addr", addr, "--log-format", "json", "--cluster", "default")

	var url string
	testkit.Eventually(t, 90*time.Second, "the console's URL in the log", func() bool {
		url = readyURL(t, p.log.Name())
		return url != ""
	})
	if want := "http://" + addr + "/"; url != want {
		t.Fatalf("the log says to open %q, want %q", url, want)
	}

	// The sample is from 2017 to 2025: once classify's heartbeats have named the cluster's
	// release (1.20, its controller manager's agent), the first screen judges the release after
	// it, 1.21, and names what blocks it: the two kubelets 1.14 out of the version-skew policy
	// (failing already), from the window of their newest use, older than the lookback before
	// its newest finding, with their callers.
	var next, index string
	testkit.Eventually(t, 60*time.Second, "the sample's release and blockers on the first screen", func() bool {
		index = get(t, url)
		next = href(index, "callers-link")
		return next != "" && strings.Contains(index, `<span class="current">1.20</span>`)
	})
	for _, want := range []string{"kubelet 1.14", "version-skew", "system:node:gce-scale-cluster-minion-group-", `class="blocker-week"`, `<span class="failing-count">1</span> failing now`} {
		if !strings.Contains(index, want) {
			t.Errorf("the first screen lacks %q:\n%.3000s", want, index)
		}
	}
	// classify's heartbeats reach the console: its newest event is the sample's newest event
	// (2025-10-07T16:19:19.643609Z, to the minute), months after its newest finding (a kubectl
	// 1.26 seen 2025-03-04).
	const newestEvent, newestFinding = `<span class="newest-event">2025-10-07 16:19:00Z</span>`, `<span class="newest-finding">2025-03-04 06:22:18Z</span>`
	testkit.Eventually(t, 60*time.Second, "the sample's newest event on the first screen", func() bool {
		index = get(t, url)
		return strings.Contains(index, newestEvent)
	})
	if !strings.Contains(index, newestFinding) {
		t.Errorf("the first screen lacks %q:\n%.3000s", newestFinding, index)
	}
	steps := []struct{ class, page string }{{"requests-link", "callers"}, {"request-link", "requests"}}
	for _, s := range steps {
		body := get(t, url+strings.TrimPrefix(next, "/"))
		if next = href(body, s.class); next == "" {
			t.Fatalf("the %s page has no %s link:\n%.3000s", s.page, s.class, body)
		}
	}
	// Kept forever (--retention-days 0), the search of 2019 finds the sample's kubelets (the
	// default retention's test finds none there).
	if search := get(t, url+"search?cluster=default&by=user&q=system%3Anode&until=2019-12-31&days=400"); !strings.Contains(search, "gce-scale-cluster-minion-group") {
		t.Errorf("the search of 2019 lacks the sample's kubelets:\n%.3000s", search)
	}
	body := get(t, url+strings.TrimPrefix(next, "/"))
	for _, want := range []string{`id="audit-id"`, "kubelet 1.14", "system:node:gce-scale-cluster-minion-group-"} {
		if !strings.Contains(body, want) {
			t.Errorf("the request page lacks %q:\n%.3000s", want, body)
		}
	}
}

// TestSampleExpiresWithTheDefaultRetention runs the all-in-one on examples/audit.log with the
// default retention (400 days): every event of the sample (2017 to 2025) is older than it, so
// no page names a caller of the sample, and the first screen and the readiness gate say that
// the events arrived and expired, and which flag keeps them. The sample's newest event is of
// 2025-10-07: from 2026-11-12 on it lies past 400 days, by the real clock the engine's TTL
// reads.
func TestSampleExpiresWithTheDefaultRetention(t *testing.T) {
	if err := chdb.Available(); err != nil {
		enginetest.Unavailable(t, "chdb", err)
	}
	if now := testkit.Now(); now.Before(time.Date(2026, 11, 12, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("the sample's newest event is within 400 days of %s: this test needs a later clock", now.Format(time.DateOnly))
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	p := start(t, dir, "auditlens", "--data-root", filepath.Join(dir, "data"), "--audit-log", "../../../examples/audit.log",
		"--retention-days", strconv.Itoa(engine.DefaultRetentionDays), // the default, given: start passes 0 otherwise
		"--metrics-addr", freeAddr(t), "--report-console-addr", addr, "--log-format", "json", "--cluster", "default")
	var url string
	testkit.Eventually(t, 90*time.Second, "the console's URL in the log", func() bool {
		url = readyURL(t, p.log.Name())
		return url != ""
	})
	var index string
	testkit.Eventually(t, 60*time.Second, "the first screen says the sample expired", func() bool {
		index = get(t, url)
		return strings.Contains(index, "arrived, all older than the retention")
	})
	for _, want := range []string{"events of 2017 to 2025 arrived", "--retention-days 400 keeps"} {
		if !strings.Contains(index, want) {
			t.Errorf("the first screen lacks %q:\n%.3000s", want, index)
		}
	}
	// Callers of the sample: its kubelets, their node names and addresses, its kubectl.
	callers := []string{"gce-scale-cluster-minion-group", "kubelet/v1.14", "35.229.86.146", "kubectl/v1.26", "callers-link"}
	for _, c := range callers {
		if strings.Contains(index, c) {
			t.Errorf("the first screen names %q, a caller of the expired sample:\n%.3000s", c, index)
		}
	}
	// The drill-down over the window of the sample's kubelets (2019): nothing either.
	search := get(t, url+"search?cluster=default&by=user&q=system%3Anode&until=2019-12-31&days=400")
	for _, c := range callers[:3] {
		if strings.Contains(search, c) {
			t.Errorf("the search of 2019 names %q, a caller of the expired sample:\n%.3000s", c, search)
		}
	}
	gate := get(t, url+"api/v1/readiness?cluster=default&target_version=1.38")
	var res struct{ State, Message string }
	if err := json.Unmarshal([]byte(gate), &res); err != nil {
		t.Fatal(err)
	}
	if res.State != "unknown" || !strings.Contains(res.Message, "arrived, all older than the retention") {
		t.Errorf("the gate: %s %q, want unknown, saying the events expired", res.State, res.Message)
	}
	for _, c := range callers {
		if strings.Contains(gate, c) {
			t.Errorf("the gate names %q, a caller of the expired sample: %s", c, gate)
		}
	}
}

// readyURL is the url of the "ready: open the console" line of the JSON log in path, "" when
// there is none yet; a second such line fails the test.
func readyURL(t *testing.T, path string) string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var url string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "ready: open the console" {
			continue
		}
		if url != "" {
			t.Fatalf("the console's URL logged twice")
		}
		url = line.URL
	}
	return url
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%.1000s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

// href is the target of the first link of class in page, "" when there is none.
func href(page, class string) string {
	m := regexp.MustCompile(`class="` + regexp.QuoteMeta(class) + `" href="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}
