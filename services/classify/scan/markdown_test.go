package scan

import (
	"bytes"
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/auditlens/auditlens/lib/printable"
)

// render turns GitHub-flavoured Markdown into HTML as GitHub renders a pull request or a
// ticket: goldmark with the GFM extensions (tables, autolinks, strikethrough, task lists).
func render(t *testing.T, md string) string {
	t.Helper()
	var out bytes.Buffer
	if err := goldmark.New(goldmark.WithExtensions(extension.GFM)).Convert([]byte(md), &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// Each value comes back from the rendered cell exactly, as code: a pipe, a backslash before
// a pipe, backticks at either end, spaces at both ends, HTML, autolinks.
func TestCodeSpanKeepsTheValue(t *testing.T) {
	for _, v := range []string{"a|b", `a\|b`, "`x`", "``", " a ", `x\`, "a ``` b", "<img src=x>", "www.evil.example", "http://e.x/y", "*b* _i_ ~~s~~", "[l](http://e.x)"} {
		got := render(t, "| h |\n|---|\n| "+code(v)+" |\n")
		want := "<td><code>" + html.EscapeString(v) + "</code></td>"
		if !strings.Contains(got, want) {
			t.Errorf("%q as %q renders\n%s\nwant %s", v, code(v), got, want)
		}
	}
	if code("") != "" {
		t.Errorf(`code("") = %q`, code(""))
	}
	if got := code("a\nb\x1b[2J"); got != "`a\\nb\\x1b[2J`" {
		t.Errorf("controls: %q", got)
	}
}

// An attacker writes the user agent, user and object name of an audit event. In the
// Markdown (findings and both summaries) they must not add a cell, a row, a link, an image,
// HTML or emphasis, and must show as written (control characters escaped).
func TestMarkdownWithHostileValues(t *testing.T) {
	ua := "evil | `rm -rf /` ``` <img src=x onerror=alert(1)> [click](http://evil.example) ![t](http://t.example/p.gif) " +
		"*bold* _it_ ~~del~~ www.evil.example\n| forged | row |\x1b[2J\\"
	user := "ci-bot|admin` <b>x</b> http://evil.example"
	ev := strings.NewReplacer(
		`"userAgent":"helm/v3.8.0"`, `"userAgent":`+jsonString(ua),
		`"username":"ci-bot"`, `"username":`+jsonString(user),
		`"namespace":"x"`, `"namespace":"x|y<i>"`,
	).Replace(removedEv)
	f := write(t, "audit.log", ev+"\n"+deprecatedEv+"\n")
	for _, groupBy := range []string{"api", "caller"} {
		code, md, errOut := run(t, "", "--format", "markdown", "--group-by", groupBy, "--target-version", "1.25", f)
		if code != ExitRemoved {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.ContainsAny(md, "\x1b\r") {
			t.Errorf("raw control characters:\n%q", md)
		}
		out := render(t, md)
		for _, bad := range []string{"<a ", "<img", "<b>", "<i>", "<em>", "<del>", "onerror=alert(1)>"} {
			if strings.Contains(out, bad) {
				t.Errorf("group by %s: rendered markup %q:\n%s", groupBy, bad, out)
			}
		}
		// scan's own bold: the blocker lists' titles and the "Removed in" cells that block.
		if strings.Count(out, "<strong>") != strings.Count(md, "**blocks 1.25**")+strings.Count(md, "\n**Blocks the upgrade to 1.25") {
			t.Errorf("group by %s: bold text not written by scan:\n%s", groupBy, out)
		}
		tables := regexp.MustCompile(`(?s)<table>.*?</table>`).FindAllString(out, -1)
		if len(tables) != 2 {
			t.Fatalf("group by %s: %d tables, want the findings and the summary:\n%s", groupBy, len(tables), out)
		}
		for i, table := range tables {
			rows := regexp.MustCompile(`(?s)<tr>.*?</tr>`).FindAllString(table, -1)
			want := []int{3, 3}[i] // header and two findings; header and two APIs or two callers
			if len(rows) != want {
				t.Errorf("group by %s, table %d: %d rows, want %d:\n%s", groupBy, i, len(rows), want, table)
			}
			cells := strings.Count(rows[0], "<th")
			for _, r := range rows[1:] {
				if n := strings.Count(r, "<td"); n != cells {
					t.Errorf("group by %s, table %d: a row of %d cells under %d headers:\n%s", groupBy, i, n, cells, r)
				}
			}
		}
		for _, v := range []string{ua, user} {
			if want := "<code>" + html.EscapeString(printable.String(v)) + "</code>"; !strings.Contains(out, want) {
				t.Errorf("group by %s: %q not shown as it is (want %s):\n%s", groupBy, v, want, out)
			}
		}
		if !strings.Contains(out, "<code>x|y&lt;i&gt;/</code>") {
			t.Errorf("group by %s: the object is not shown as it is:\n%s", groupBy, out)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
