package scan

import (
	"fmt"
	"io"
	"strings"

	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// code returns s as a GitHub-flavoured Markdown code span for a table cell, so that text an
// attacker wrote (a user agent, a user or object name) shows as it is and is never read as
// markup: no link, image, HTML, emphasis or extra cell. Control characters are escaped
// (lib/printable; a newline becomes \n), "|" is written "\|" (GFM splits a row into cells
// before it reads code spans, and drops that backslash), and the span is fenced with more
// backticks than the longest run of backticks in s. "" gives an empty cell.
func code(s string) string {
	s = printable.String(s)
	if s == "" {
		return ""
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	// A span's content loses one space at each end when it has one at both (and is not all
	// spaces); one starting or ending with a backtick needs a space to stay apart from the
	// fence.
	allSpaces := strings.Trim(s, " ") == ""
	if s[0] == '`' || s[len(s)-1] == '`' || (s[0] == ' ' && s[len(s)-1] == ' ' && !allSpaces) {
		s = " " + s + " "
	}
	return fence + s + fence
}

// MarkdownCode is s as a Markdown code span for a table cell (see code).
func MarkdownCode(s string) string { return code(s) }

// markdownTable prints findings as a GitHub-flavoured Markdown table (--format markdown).
type markdownTable struct {
	w      io.Writer
	header bool
}

func (t *markdownTable) row(f *auditlensv1.Finding) {
	if !t.header {
		fmt.Fprintln(t.w, "## Findings")
		fmt.Fprintln(t.w)
		fmt.Fprintln(t.w, "| Time | Severity | Rule | Removed in | API | Verb | Object | User | User agent |")
		fmt.Fprintln(t.w, "|---|---|---|---|---|---|---|---|---|")
		t.header = true
	}
	r := values(f)
	// values has them escaped for a terminal and "-" for none: code takes the raw values.
	obj := f.Name
	if f.Namespace != "" {
		obj = f.Namespace + "/" + f.Name
	}
	if f.Subresource != "" {
		obj += " (" + f.Subresource + ")"
	}
	fmt.Fprintf(t.w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r[0], r[1], code(f.RuleId), code(f.RemovedIn),
		code(apiName(f)), code(f.Verb), code(obj), code(f.Username), code(f.UserAgent))
}

func (t *markdownTable) flush() {}

// markdownCallers is how many callers a row of the summary by API names.
const markdownCallers = 3

// writeMarkdown prints the summary as Markdown: head (the counts) as a paragraph, notes as
// a list, then one table by rule and API (groupBy "api") or by caller (groupBy "caller").
func (s *summary) writeMarkdown(w io.Writer, head string, notes []string, u Upgrade, groupBy string, cat *rules.Catalogue) {
	fmt.Fprintf(w, "\n## Summary\n\n%s.\n", head)
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if len(s.rules) == 0 {
		return
	}
	s.writeMarkdownBlockers(w, u)
	s.writeMarkdownRollback(w, u, cat)
	fmt.Fprintln(w)
	if groupBy == "caller" {
		fmt.Fprintln(w, "| User | User agent | Findings | Rule | Severity | API | Deprecated in | Removed in | Use instead |")
		fmt.Fprintln(w, "|---|---|--:|---|---|---|---|---|---|")
		callers := s.byCaller()
		for i, c := range callers {
			if i == maxCallers {
				fmt.Fprintf(w, "\n%d more callers: `classify scan --format json` lists every finding.\n", len(callers)-maxCallers)
				break
			}
			for _, e := range c.entries {
				fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", code(c.who.user), code(c.who.agent), e.count,
					code(e.rule.id), e.rule.severity, code(e.api.api), code(e.api.deprecatedIn),
					removal(e.api, u), code(e.api.replacement))
			}
		}
		return
	}
	fmt.Fprintln(w, "| Rule | Severity | API | Findings | Deprecated in | Removed in | Use instead | Callers |")
	fmt.Fprintln(w, "|---|---|---|--:|---|---|---|---|")
	for _, r := range s.sortedRules() {
		for _, a := range r.sortedAPIs() {
			var who []string
			callers := a.sortedCallers()
			for i, c := range callers {
				if i == markdownCallers {
					who = append(who, fmt.Sprintf("and %d more", len(callers)-markdownCallers))
					break
				}
				one := code(c.user)
				if c.agent != "" {
					one += " " + code(c.agent)
				}
				who = append(who, fmt.Sprintf("%s (%d)", one, a.callers[c].count))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s |\n", code(r.id), r.severity, code(a.api), a.count,
				code(a.deprecatedIn), removal(a, u), code(a.replacement), strings.Join(who, "<br>"))
		}
	}
}

// removal is the "Removed in" cell: the release, and whether it blocks the upgrade (new in
// the target, or failing now).
func removal(a *apiSum, u Upgrade) string {
	cell := code(a.removedIn)
	if mark := strings.TrimSpace(blockMark(a, u)); mark != "" {
		cell += " **" + strings.Trim(mark, "[]") + "**"
	}
	return cell
}

// writeMarkdownBlockers writes the two lists of writeBlockers as Markdown: what the upgrade
// breaks, then what is failing already, counted apart.
func (s *summary) writeMarkdownBlockers(w io.Writer, u Upgrade) {
	breaks, failing := s.blockers()
	breaksHead, failingHead := blockerHeads(u)
	list := func(head string, es []blockerEntry, always bool) {
		if len(es) == 0 && !always {
			return
		}
		fmt.Fprintf(w, "\n**%s**: %s\n", head, countOf(es))
		if len(es) > 0 {
			fmt.Fprintln(w)
		}
		for i, e := range es {
			if i == blockersShown {
				fmt.Fprintf(w, "- and %d more (in the table below)\n", len(es)-blockersShown)
				break
			}
			n := len(e.api.callers)
			name := code(e.api.api) + " (" + code(e.rule.id) + ")"
			if e.api.api == "(no API)" {
				name = code(e.rule.id)
			}
			fmt.Fprintf(w, "- %s: %d finding%s by %d caller%s%s%s\n", name, e.api.count, plural(e.api.count), n, plural(n),
				markdownFacts(e.api), notFound(e.api))
		}
	}
	list(breaksHead, breaks, true)
	list(failingHead, failing, false)
}

// writeMarkdownRollback is writeRollback in Markdown.
func (s *summary) writeMarkdownRollback(w io.Writer, u Upgrade, cat *rules.Catalogue) {
	prev, apis, ok := s.rollbackOf(u, cat)
	if !ok {
		return
	}
	if len(apis) == 0 {
		fmt.Fprintf(w, "\n**A rollback to %s**: nothing seen uses what %s introduced.\n", code(prev.String()), code(u.Current.String()))
		return
	}
	fmt.Fprintf(w, "\n**A rollback to %s** breaks what uses the APIs %s introduced: %d API%s\n\n", code(prev.String()), code(u.Current.String()), len(apis), plural(len(apis)))
	for _, a := range apis {
		n := len(a.callers)
		fmt.Fprintf(w, "- %s (%s): %d caller%s, first %s\n", code(a.api), code(rules.RollbackAPI), n, plural(n), code(a.sortedCallers()[0].String()))
	}
}

// markdownFacts is apiSum.facts with each release and API as a code span.
func markdownFacts(a *apiSum) string {
	var b strings.Builder
	if a.deprecatedIn != "" {
		b.WriteString(", deprecated in " + code(a.deprecatedIn))
	}
	if a.removedIn != "" {
		b.WriteString(", " + removalWord(a.rule) + " " + code(a.removedIn))
	}
	if a.replacement != "" {
		b.WriteString(", use " + code(a.replacement))
	}
	return b.String()
}
