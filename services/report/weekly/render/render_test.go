package render

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/fixture"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it); got:\n%s", path, got)
	}
}

func TestGolden(t *testing.T) {
	img := Images{Daily: "cid:daily.png", Weekly: "cid:weekly.png"}
	for _, f := range Formats {
		t.Run(f, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, f, fixture.Report(), img); err != nil {
				t.Fatal(err)
			}
			golden(t, "report."+f, buf.Bytes())
		})
	}
}

func TestUnknownFormat(t *testing.T) {
	err := Write(&bytes.Buffer{}, "pdf", fixture.Report(), Images{})
	if err == nil || !strings.Contains(err.Error(), `"pdf"`) {
		t.Fatalf("want an error naming the format, got %v", err)
	}
}

func TestHTMLEscapesAuditData(t *testing.T) {
	var buf bytes.Buffer
	if err := HTML(&buf, fixture.Report(), Images{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, bad := range []string{"<script>alert", "<script>document", "<img src=x", `"onload=alert`, "\x1b"} {
		if strings.Contains(out, bad) {
			t.Errorf("HTML contains unescaped %q", bad)
		}
	}
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		"&lt;img src=x onerror=alert(3)&gt;",
		"&#34;onload=alert(2) x=&#39;y&#39; &amp;",
		fixture.UnicodeUser,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("HTML lacks escaped %q", want)
		}
	}
	if n := strings.Count(out, "<script"); n != 0 {
		t.Errorf("%d <script elements in the HTML, want none", n)
	}
	if n := strings.Count(out, `<tr class="blocker">`); n != 3 {
		t.Errorf("%d blocker rows, want 3", n)
	}
}

func TestHTMLNoBlockers(t *testing.T) {
	r := fixture.Report()
	r.Blockers, r.New, r.Resolved = nil, nil, nil
	var buf bytes.Buffer
	if err := HTML(&buf, r, Images{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `id="no-blockers"`) || strings.Contains(buf.String(), `id="blockers"`) {
		t.Fatalf("want the no-blockers note and no table:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "<img") {
		t.Fatal("no image sources given but an <img> was rendered")
	}
}

func TestHTMLRejectsScriptImageSource(t *testing.T) {
	var buf bytes.Buffer
	if err := HTML(&buf, fixture.Report(), Images{Daily: "data:image/png;base64,AAAA"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `src="data:image/png;base64,AAAA"`) {
		t.Fatal("data: image source not kept")
	}
}

func TestTextEscapesControlCharacters(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, fixture.Report()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "\x1b") {
		t.Error("text carries a raw escape character")
	}
	if !strings.Contains(out, `evil\x1b[31mred\nforged line`) {
		t.Error("control characters not shown escaped")
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "forged line") {
			t.Error("a newline in a user agent forged a line")
		}
	}
	if !strings.Contains(out, fixture.UnicodeUser) {
		t.Error("unicode user name not kept")
	}
}

func TestCSVRoundTripsAndDefusesFormulas(t *testing.T) {
	var buf bytes.Buffer
	if err := CSV(&buf, fixture.Report()); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+5 {
		t.Fatalf("%d records, want header + 5 callers", len(recs))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	var agents, users []string
	for _, r := range recs[1:] {
		agents = append(agents, r[col["user_agent"]])
		users = append(users, r[col["username"]])
		if len(r) != len(CSVHeader) {
			t.Fatalf("row has %d fields, want %d", len(r), len(CSVHeader))
		}
	}
	if !contains(agents, fixture.ScriptAgent) || !contains(agents, fixture.ControlUA) {
		t.Errorf("user agents not kept verbatim: %q", agents)
	}
	if !contains(users, "'"+fixture.FormulaUser) || contains(users, fixture.FormulaUser) {
		t.Errorf("formula user not defused: %q", users)
	}
}

func TestJSONRoundTrips(t *testing.T) {
	var buf bytes.Buffer
	in := fixture.Report()
	if err := JSON(&buf, in); err != nil {
		t.Fatal(err)
	}
	var out weekly.Report
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	// The blocker new in the target first, then the two failing already (the ingresses first).
	if out.Target != in.Target || out.Current != in.Current || out.CurrentWhy != in.CurrentWhy || out.WeekEnding != in.WeekEnding || len(out.Blockers) != 3 ||
		out.Blockers[0].FailingNow || !out.Blockers[1].FailingNow || !out.Blockers[2].FailingNow ||
		out.Blockers[1].Callers[1].UserAgent != fixture.ScriptAgent || out.Blockers[1].APIGroup != "extensions" {
		t.Fatalf("round trip lost data: %+v", out)
	}
}

func TestSubject(t *testing.T) {
	got := Subject(fixture.Report())
	want := "auditlens weekly: prod-eu, week ending 2026-11-22: 1 upgrade blocker for 1.32, 2 failing now"
	if got != want {
		t.Fatalf("subject %q, want %q", got, want)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestCoverageLine: a week whose events came without their bodies says what it rests on and
// what it could not check, in text and HTML; a week no heartbeat described says nothing.
func TestCoverageLine(t *testing.T) {
	r := fixture.Report()
	r.Coverage, r.NotChecked = "events by file, at Metadata level; writes logged without their bodies", "the rules that read request bodies <b>"
	var text, html bytes.Buffer
	if err := Text(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := HTML(&html, r, Images{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "The report rests on events by file, at Metadata level; writes logged without their bodies. Not checked: the rules that read request bodies <b>.\n") {
		t.Errorf("text lacks the coverage line:\n%s", text.String())
	}
	if !strings.Contains(html.String(), `<p class="meta warning" id="coverage">The report rests on events by file`) || !strings.Contains(html.String(), "request bodies &lt;b&gt;.") {
		t.Errorf("HTML lacks the escaped coverage line:\n%s", html.String())
	}
	var none bytes.Buffer
	if err := HTML(&none, fixture.Report(), Images{}); err != nil || strings.Contains(none.String(), `id="coverage"`) {
		t.Errorf("a week without coverage names one (%v)", err)
	}
}
