package scan

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// summary groups findings by rule, API and caller. Every string it holds comes from an event
// or a rules file and is escaped (lib/printable) once, when it is added.
type summary struct {
	rules map[string]*ruleSum
}

type ruleSum struct {
	id, severity string
	count        int
	apis         map[string]*apiSum
}

type apiSum struct {
	api, removedIn, deprecatedIn, replacement, message string
	count                                              int
	blocking                                           bool
	callers                                            map[caller]*tally
}

// caller is who made a request: user name and user agent.
type caller struct{ user, agent string }

// String is the caller as the text summary shows it: the user, two spaces, the user agent.
func (c caller) String() string {
	if c.agent == "" {
		return c.user
	}
	return c.user + "  " + c.agent
}

// fit is String cut to w cells (w <= 0: not cut): the user kept whole when it fits, else
// cut in the middle without the agent.
func (c caller) fit(w int) string {
	s := c.String()
	if w <= 0 || cells(s) <= w {
		return s
	}
	if rest := w - cells(c.user) - 2; rest >= 8 {
		return c.user + "  " + cutEnd(c.agent, rest)
	}
	return cutMiddle(c.user, w)
}

// tally counts findings, and among them those that block the upgrade.
type tally struct{ count, blocking int }

func (s *summary) add(f *auditlensv1.Finding, blocking bool) {
	if s.rules == nil {
		s.rules = map[string]*ruleSum{}
	}
	r := s.rules[f.RuleId]
	if r == nil {
		r = &ruleSum{id: printable.String(f.RuleId), severity: SeverityName(f.Severity), apis: map[string]*apiSum{}}
		s.rules[f.RuleId] = r
	}
	r.count++
	api := printable.String(apiName(f))
	if api == "" {
		api = "(no API)"
	}
	a := r.apis[api]
	if a == nil {
		// A finding's strings share one allocation: what the summary keeps is cloned, so it
		// does not keep whole findings alive.
		a = &apiSum{api: strings.Clone(api), removedIn: strings.Clone(printable.String(f.RemovedIn)), deprecatedIn: printable.String(f.DeprecatedIn),
			replacement: printable.String(f.Replacement), message: printable.String(f.Message), callers: map[caller]*tally{}}
		r.apis[api] = a
	}
	a.count++
	a.blocking = a.blocking || blocking
	c := caller{printable.String(f.Username), printable.String(f.UserAgent)}
	t := a.callers[c]
	if t == nil {
		t = &tally{}
		a.callers[caller{strings.Clone(c.user), strings.Clone(c.agent)}] = t
	}
	t.count++
	if blocking {
		t.blocking++
	}
}

func groupVersion(g, v string) string {
	if g == "" {
		return v
	}
	return g + "/" + v
}

var severityOrder = map[string]int{"critical": 0, "warning": 1, "info": 2}

// sortedRules are the rules by severity, then findings (most first), then id.
func (s *summary) sortedRules() []*ruleSum {
	rules := slices.Collect(maps.Values(s.rules))
	slices.SortFunc(rules, func(a, b *ruleSum) int {
		if d := severityOrder[a.severity] - severityOrder[b.severity]; d != 0 {
			return d
		}
		if a.count != b.count {
			return b.count - a.count
		}
		return strings.Compare(a.id, b.id)
	})
	return rules
}

// sortedAPIs are the APIs of r by findings (most first), then name.
func (r *ruleSum) sortedAPIs() []*apiSum {
	apis := slices.Collect(maps.Values(r.apis))
	slices.SortFunc(apis, func(a, b *apiSum) int {
		if a.count != b.count {
			return b.count - a.count
		}
		return strings.Compare(a.api, b.api)
	})
	return apis
}

// sortedCallers are the callers of a by findings (most first), then name.
func (a *apiSum) sortedCallers() []caller {
	callers := slices.Collect(maps.Keys(a.callers))
	slices.SortFunc(callers, func(x, y caller) int {
		if d := a.callers[y].count - a.callers[x].count; d != 0 {
			return d
		}
		return strings.Compare(x.String(), y.String())
	})
	return callers
}

// facts is "deprecated in X, removed in Y, use Z" for a, each part when known.
func (a *apiSum) facts() string {
	var b strings.Builder
	if a.deprecatedIn != "" {
		b.WriteString(", deprecated in " + a.deprecatedIn)
	}
	if a.removedIn != "" {
		b.WriteString(", removed in " + a.removedIn)
	}
	if a.replacement != "" {
		b.WriteString(", use " + a.replacement)
	}
	return b.String()
}

func blockMark(target kubeversion.Version) string {
	if !target.IsZero() {
		return "  [blocks " + target.String() + "]"
	}
	return "  [removed]"
}

// callerSum is one caller and what it called: the summary grouped by caller.
type callerSum struct {
	who     caller
	total   tally
	entries []callerEntry
}

// callerEntry is one rule and API a caller is found for.
type callerEntry struct {
	rule *ruleSum
	api  *apiSum
	tally
}

// byCaller regroups the findings by caller: callers with findings that block the upgrade
// first, then by findings (most first), then name; each caller's rules and APIs in the order
// the summary by API has them.
func (s *summary) byCaller() []*callerSum {
	m := map[caller]*callerSum{}
	for _, r := range s.sortedRules() {
		for _, a := range r.sortedAPIs() {
			for _, c := range a.sortedCallers() {
				cs := m[c]
				if cs == nil {
					cs = &callerSum{who: c}
					m[c] = cs
				}
				t := *a.callers[c]
				cs.total.count += t.count
				cs.total.blocking += t.blocking
				cs.entries = append(cs.entries, callerEntry{rule: r, api: a, tally: t})
			}
		}
	}
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(x, y *callerSum) int {
		if d := y.total.blocking - x.total.blocking; d != 0 {
			return d
		}
		if d := y.total.count - x.total.count; d != 0 {
			return d
		}
		return strings.Compare(x.who.String(), y.who.String())
	})
	return out
}

// Callers shown: per API in the summary by API, in all in the summary by caller.
const (
	callersPerAPI = 10
	maxCallers    = 50
)

// textOut writes lines fitted to width cells (0: as they are): long lines wrapped at spaces,
// lists of callers cut.
type textOut struct {
	w     io.Writer
	width int
}

// line writes s wrapped, continuation lines indented by hang spaces.
func (o textOut) line(s string, hang int) {
	for _, l := range wrap(s, o.width, hang) {
		fmt.Fprintln(o.w, l)
	}
}

// writeText prints the summary by rule, API and caller (groupBy "api") or by caller, rule
// and API (groupBy "caller").
func (s *summary) writeText(o textOut, target kubeversion.Version, groupBy string) {
	if groupBy == "caller" {
		s.writeByCaller(o, target)
		return
	}
	for _, r := range s.sortedRules() {
		o.line("", 0)
		o.line(fmt.Sprintf("%s (%s): %d finding%s", r.id, r.severity, r.count, plural(r.count)), 4)
		for _, a := range r.sortedAPIs() {
			line := fmt.Sprintf("  %s: %d", a.api, a.count) + a.facts()
			if a.blocking {
				line += blockMark(target)
			}
			o.line(line, 6)
			callers := a.sortedCallers()
			for i, c := range callers {
				if i == callersPerAPI {
					o.line(fmt.Sprintf("    ... %d more callers", len(callers)-callersPerAPI), 6)
					break
				}
				// The count first and never cut; the caller cut to what is left.
				head := fmt.Sprintf("    %6d  ", a.callers[c].count)
				w := 0
				if o.width > 0 {
					w = max(o.width-cells(head), 1)
				}
				fmt.Fprintln(o.w, head+c.fit(w))
			}
			o.line("    what to do: "+a.message, 6)
		}
	}
}

func (s *summary) writeByCaller(o textOut, target kubeversion.Version) {
	callers := s.byCaller()
	for i, c := range callers {
		if i == maxCallers {
			o.line("", 0)
			o.line(fmt.Sprintf("... %d more callers (--format json lists every finding)", len(callers)-maxCallers), 4)
			break
		}
		tail := fmt.Sprintf(": %d finding%s", c.total.count, plural(c.total.count))
		if c.total.blocking > 0 {
			tail += fmt.Sprintf(", %d blocking", c.total.blocking)
		}
		w := 0
		if o.width > 0 {
			w = max(o.width-cells(tail), 1)
		}
		o.line("", 0)
		fmt.Fprintln(o.w, c.who.fit(w)+tail)
		for _, e := range c.entries {
			line := fmt.Sprintf("  %s (%s) %s: %d", e.rule.id, e.rule.severity, e.api.api, e.count) + e.api.facts()
			if e.blocking > 0 {
				line += blockMark(target)
			}
			o.line(line, 6)
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// writeSummary writes what closes a scan: the counts, the bad lines and envelope records
// skipped, the findings by API or caller, and the writes logged without their body.
func (s *scanner) writeSummary(w io.Writer, files int, took time.Duration) {
	events := s.events.Load()
	head := fmt.Sprintf("%d event%s in %d input%s, %d finding%s", events, plural(int(events)), files, plural(files), s.findings, plural(s.findings))
	if !s.target.IsZero() {
		head += fmt.Sprintf(", %d blocking an upgrade to %s", s.blocking, s.target)
	} else {
		head += fmt.Sprintf(", %d on something already removed in some release", s.blocking)
	}
	head += fmt.Sprintf(", %d bad line%s skipped", s.badLines, plural(s.badLines))
	md := s.cfg.Format == "markdown"
	esc := printable.String
	if md {
		esc = code
	}
	var notes []string
	for _, r := range slices.Sorted(maps.Keys(s.badReasons)) {
		notes = append(notes, fmt.Sprintf("bad lines, %s: %d", r, s.badReasons[r]))
	}
	if s.badLines > s.cfg.MaxBadReports {
		notes = append(notes, fmt.Sprintf("(only the first %d were reported one by one)", s.cfg.MaxBadReports))
	}
	skipped := map[string]int{}
	metadataOnly := map[string]int{}
	for _, wk := range s.workers {
		for r, n := range wk.skipped {
			skipped[r] += n
		}
		for r, n := range wk.metadataOnly {
			metadataOnly[r] += *n
		}
	}
	for _, r := range slices.Sorted(maps.Keys(skipped)) {
		// The reason may name a category read from the envelope.
		notes = append(notes, fmt.Sprintf("envelope records without audit events, %s: %d (skipped)", esc(r), skipped[r]))
	}
	note := ""
	if len(metadataOnly) > 0 {
		n := 0
		var parts []string
		for _, r := range slices.Sorted(maps.Keys(metadataOnly)) {
			n += metadataOnly[r]
			parts = append(parts, fmt.Sprintf("%s %d", esc(r), metadataOnly[r]))
		}
		were := "were"
		if n == 1 {
			were = "was"
		}
		note = fmt.Sprintf("note: %d write%s %s logged at Metadata level only (%s), so the rules that read request bodies "+
			"(seccomp and AppArmor annotations, CSR key usages, node labels and selectors, Service topologyKeys) "+
			"could not check them. Log these resources at Request level: see deploy/audit-policy.yaml.",
			n, plural(n), were, strings.Join(parts, ", "))
	}
	if md {
		s.sum.writeMarkdown(w, head, notes, s.target, s.cfg.GroupBy)
		if note != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimPrefix(note, "note: "))
		}
		return
	}
	o := textOut{w: w}
	if s.fitted != nil {
		o.width = s.width
	}
	o.line("", 0)
	o.line("classify scan: "+head+" ("+took.Round(time.Millisecond).String()+")", 2)
	for _, n := range notes {
		o.line("  "+n, 4)
	}
	s.sum.writeText(o, s.target, s.cfg.GroupBy)
	if note != "" {
		o.line("", 0)
		if o.width == 0 {
			o.width = 100 // a paragraph, as wide as the rest of the summary
		}
		o.line(note, 0)
	}
	if s.fitted != nil && s.fitted.cut {
		o.line("", 0)
		o.line(fmt.Sprintf("(the table is cut to %d columns: --format wide shows every value in full)", s.width), 1)
	}
}
