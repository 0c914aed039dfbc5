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
	"github.com/auditlens/auditlens/services/classify/rules"
)

// summary groups findings by rule, API and caller. Every string it holds comes from an event
// or a rules file and is escaped (lib/printable) once, when it is added.
type summary struct {
	rules map[string]*ruleSum
}

type ruleSum struct {
	id, severity string
	count        int
	apis         map[apiKey]*apiSum
}

type apiSum struct {
	// rule is the rule of the findings (one per apiSum: they are kept by rule).
	rule                                               string
	api, removedIn, deprecatedIn, replacement, message string
	count                                              int
	// notFound counts the findings answered 404: a removed API the cluster no longer serves.
	notFound int
	// introduced is the release that introduced the API (rollback-api findings).
	introduced string
	// breaks is what the upgrade does with removedIn, set by judge once the upgrade is known
	// (its current release may be read from the log itself).
	breaks  Breaks
	callers map[caller]*tally
}

// blocking reports whether a blocks the upgrade (set by judge).
func (a *apiSum) blocking() bool { return a.breaks != NotBlocking }

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

// tally counts findings, and among them those that block the upgrade (set by judge).
type tally struct{ count, blocking int }

// apiKey is an API of a rule and the release it is removed in: findings of one rule and API
// with different removals (annotations, labels) are judged apart.
type apiKey struct{ api, removedIn string }

func (s *summary) add(f *auditlensv1.Finding) {
	if s.rules == nil {
		s.rules = map[string]*ruleSum{}
	}
	r := s.rules[f.RuleId]
	if r == nil {
		r = &ruleSum{id: printable.String(f.RuleId), severity: SeverityName(f.Severity), apis: map[apiKey]*apiSum{}}
		s.rules[f.RuleId] = r
	}
	r.count++
	api := printable.String(apiName(f))
	if api == "" {
		api = "(no API)"
	}
	k := apiKey{api, f.RemovedIn}
	a := r.apis[k]
	if a == nil {
		// A finding's strings share one allocation: what the summary keeps is cloned, so it
		// does not keep whole findings alive.
		a = &apiSum{rule: strings.Clone(f.RuleId), api: strings.Clone(api), removedIn: strings.Clone(printable.String(f.RemovedIn)), deprecatedIn: printable.String(f.DeprecatedIn),
			replacement: printable.String(f.Replacement), message: printable.String(f.Message), callers: map[caller]*tally{}}
		if f.RuleId == rules.RollbackAPI {
			a.introduced = printable.String(rules.IntroducedIn(f))
		}
		r.apis[apiKey{a.api, strings.Clone(f.RemovedIn)}] = a
	}
	a.count++
	if f.ResponseCode == 404 {
		a.notFound++
	}
	c := caller{printable.String(f.Username), printable.String(f.UserAgent)}
	t := a.callers[c]
	if t == nil {
		t = &tally{}
		a.callers[caller{strings.Clone(c.user), strings.Clone(c.agent)}] = t
	}
	t.count++
}

// judge decides what u does with every API of the summary, and returns the findings that
// block it: those the upgrade breaks and those failing already.
func (s *summary) judge(u Upgrade) (breaks, failing int) {
	for _, r := range s.rules {
		for _, a := range r.apis {
			a.breaks = u.Of(a.removedIn)
			for _, t := range a.callers {
				t.blocking = 0
				if a.blocking() {
					t.blocking = t.count
				}
			}
			switch a.breaks {
			case BreaksOnUpgrade:
				breaks += a.count
			case FailingNow:
				failing += a.count
			}
		}
	}
	return breaks, failing
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
		b.WriteString(", " + removalWord(a.rule) + " " + a.removedIn)
	}
	if a.replacement != "" {
		b.WriteString(", use " + a.replacement)
	}
	return b.String()
}

// removalWord is how a finding's removed_in reads for its rule: an API is "removed in" a
// release, a kubelet or a runtime "unsupported from" it (the version-skew policy, the
// runtimes kubelets support, a kubelet on cgroup v1), a gitRepo volume or kube-proxy's ipvs
// mode "disabled from" it.
func removalWord(rule string) string {
	switch rule {
	case rules.VersionSkew, rules.NodeContainerRuntime, rules.NodeCgroupV1:
		return "unsupported from"
	case rules.GitRepoVolume, rules.KubeProxyIPVS:
		return "disabled from"
	}
	return "removed in"
}

// blockMark is the tag of a blocking API in the text summary: new in the target, or failing
// now (removed at or before the cluster's release).
func blockMark(a *apiSum, u Upgrade) string {
	switch {
	case a.breaks == FailingNow:
		return "  [failing now: removed at or before " + u.Current.String() + "]"
	case a.breaks == NotBlocking:
		return ""
	case u.Target.IsZero():
		return "  [removed]"
	case u.Current.IsZero():
		return "  [blocks " + u.Target.String() + "]"
	}
	return "  [breaks on " + u.Target.String() + "]"
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
func (s *summary) writeText(o textOut, u Upgrade, groupBy string) {
	if groupBy == "caller" {
		s.writeByCaller(o, u)
		return
	}
	for _, r := range s.sortedRules() {
		o.line("", 0)
		o.line(fmt.Sprintf("%s (%s): %d finding%s", r.id, r.severity, r.count, plural(r.count)), 4)
		for _, a := range r.sortedAPIs() {
			line := fmt.Sprintf("  %s: %d", a.api, a.count) + a.facts() + notFound(a) + blockMark(a, u)
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

func (s *summary) writeByCaller(o textOut, u Upgrade) {
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
			line := fmt.Sprintf("  %s (%s) %s: %d", e.rule.id, e.rule.severity, e.api.api, e.count) + e.api.facts() + blockMark(e.api, u)
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
	u := s.up
	switch {
	case u.Target.IsZero():
		head += fmt.Sprintf(", %d on something already removed in some release", s.blocking)
	case u.Current.IsZero():
		head += fmt.Sprintf(", %d blocking an upgrade to %s", s.blocking, u.Target)
	default:
		head += fmt.Sprintf(", %d blocking an upgrade from %s to %s", s.blocking, u.Current, u.Target)
		if s.blocking > 0 {
			head += fmt.Sprintf(" (%d new in %s, %d failing now)", s.blocking-s.failingNow, u.Target, s.failingNow)
		}
	}
	head += fmt.Sprintf(", %d bad line%s skipped", s.badLines, plural(s.badLines))
	md := s.cfg.Format == "markdown"
	esc := printable.String
	if md {
		esc = code
	}
	notes := []string{upgradeNote(u)}
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
		s.sum.writeMarkdown(w, head, notes, u, s.cfg.GroupBy, s.engine.Catalogue())
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
	s.sum.writeBlockers(o, u)
	s.sum.writeRollback(o, u, s.engine.Catalogue())
	s.sum.writeText(o, u, s.cfg.GroupBy)
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

// notFound is ", N answered 404" for an API some of whose requests the cluster answered 404
// (it no longer serves it), else "".
func notFound(a *apiSum) string {
	if a.notFound == 0 {
		return ""
	}
	return fmt.Sprintf(", %d answered 404", a.notFound)
}

// blockerEntry is one API of a rule that blocks the upgrade.
type blockerEntry struct {
	rule *ruleSum
	api  *apiSum
}

// name is the API, or the rule when the finding has no API (a removed flag or field).
func (b blockerEntry) name() string {
	if b.api.api == "(no API)" {
		return b.rule.id
	}
	return b.api.api + " (" + b.rule.id + ")"
}

// blockers are the APIs (after judge) that the upgrade breaks and those failing already,
// each list busiest first.
func (s *summary) blockers() (breaks, failing []blockerEntry) {
	for _, r := range s.sortedRules() {
		for _, a := range r.sortedAPIs() {
			switch a.breaks {
			case BreaksOnUpgrade:
				breaks = append(breaks, blockerEntry{r, a})
			case FailingNow:
				failing = append(failing, blockerEntry{r, a})
			}
		}
	}
	busiest := func(x, y blockerEntry) int {
		if x.api.count != y.api.count {
			return y.api.count - x.api.count
		}
		return strings.Compare(x.name(), y.name())
	}
	slices.SortStableFunc(breaks, busiest)
	slices.SortStableFunc(failing, busiest)
	return breaks, failing
}

// blockersShown bounds each list of writeBlockers; the rest are in the summary below it.
const blockersShown = 20

// blockerHeads are the titles of the two lists of blockers of u.
func blockerHeads(u Upgrade) (breaks, failing string) {
	switch {
	case u.Target.IsZero():
		breaks = "Removed in some release (no target: any removal blocks)"
	case u.Current.IsZero():
		breaks = "Blocks the upgrade to " + u.Target.String() + " (removed at or before it; the cluster's release is unknown: " +
			"--current-version tells what fails already from what the upgrade breaks)"
	default:
		breaks = fmt.Sprintf("Breaks on the upgrade to %s (removed after %s, the cluster's release, at or before %s)", u.Target, u.Current, u.Target)
	}
	failing = fmt.Sprintf("Failing now (removed at or before %s, the cluster's release: these callers fail today, a removed API with 404)", u.Current)
	return breaks, failing
}

// writeBlockers prints what blocks u in two lists, counted apart: what the upgrade breaks
// (new), then what is failing already.
func (s *summary) writeBlockers(o textOut, u Upgrade) {
	breaks, failing := s.blockers()
	breaksHead, failingHead := blockerHeads(u)
	if len(breaks) == 0 && len(failing) == 0 {
		o.line("", 0)
		if u.Target.IsZero() {
			o.line("Nothing removed is in use.", 2)
		} else {
			o.line("Nothing blocks the upgrade to "+u.Target.String()+".", 2)
		}
		return
	}
	list := func(head string, es []blockerEntry, always bool) {
		if len(es) == 0 && !always {
			return
		}
		o.line("", 0)
		o.line(fmt.Sprintf("%s: %s", head, countOf(es)), 4)
		for i, e := range es {
			if i == blockersShown {
				o.line(fmt.Sprintf("  ... %d more (in the summary below)", len(es)-blockersShown), 4)
				break
			}
			n := len(e.api.callers)
			o.line(fmt.Sprintf("  %s: %d finding%s by %d caller%s", e.name(), e.api.count, plural(e.api.count), n, plural(n))+
				e.api.facts()+notFound(e.api), 6)
		}
	}
	list(breaksHead, breaks, true)
	for _, h := range hopsOf(breaks, u) {
		what := "nothing in use"
		if len(h.entries) > 0 {
			what = countOf(h.entries)
		}
		o.line(fmt.Sprintf("    hop to %s removes %s", h.release, what), 6)
	}
	list(failingHead, failing, false)
}

// rollbackOf is what a rollback of a cluster at u.Current to the release before needs: the
// rollback-api findings of the APIs that u.Current introduced, by count. ok is false when the
// catalogue cannot say (the cluster's release is unknown, or older than the releases whose
// APIs the rule follows).
func (s *summary) rollbackOf(u Upgrade, cat *rules.Catalogue) (prev kubeversion.Version, apis []*apiSum, ok bool) {
	floor, known := rules.RollbackFloor(cat)
	if u.Current.IsZero() || u.Current.Minor == 0 || !known || u.Current.Less(floor) {
		return prev, nil, false
	}
	if r := s.rules[rules.RollbackAPI]; r != nil {
		for _, a := range r.sortedAPIs() {
			if a.introduced == u.Current.String() {
				apis = append(apis, a)
			}
		}
	}
	return kubeversion.Version{Major: u.Current.Major, Minor: u.Current.Minor - 1}, apis, true
}

// writeRollback says what a rollback to the release before the cluster's would break: who
// calls what the cluster's release introduced.
func (s *summary) writeRollback(o textOut, u Upgrade, cat *rules.Catalogue) {
	prev, apis, ok := s.rollbackOf(u, cat)
	if !ok {
		return
	}
	o.line("", 0)
	if len(apis) == 0 {
		o.line(fmt.Sprintf("A rollback to %s: nothing seen uses what %s introduced.", prev, u.Current), 2)
		return
	}
	o.line(fmt.Sprintf("A rollback to %s breaks what uses the APIs %s introduced (rollback-api): %d API%s", prev, u.Current, len(apis), plural(len(apis))), 4)
	for _, a := range apis {
		n := len(a.callers)
		o.line(fmt.Sprintf("  %s: %d caller%s (%s)", a.api, n, plural(n), a.sortedCallers()[0]), 6)
	}
}

// hop is one release of an upgrade that skips releases and what it removes that is in use.
type hop struct {
	release kubeversion.Version
	entries []blockerEntry
}

// hopsOf is, for an upgrade from a known release that skips releases (1.35 to 1.38), each
// release on the way and the blockers of breaks it removes, in order; nil for one step.
func hopsOf(breaks []blockerEntry, u Upgrade) []hop {
	if u.Current.IsZero() || u.Target.Major != u.Current.Major || u.Target.Minor-u.Current.Minor < 2 {
		return nil
	}
	var hops []hop
	for v := u.Current.Next(); !u.Target.Less(v); v = v.Next() {
		h := hop{release: v}
		for _, e := range breaks {
			if r, err := kubeversion.Parse(e.api.removedIn); err == nil && r == v {
				h.entries = append(h.entries, e)
			}
		}
		hops = append(hops, h)
	}
	return hops
}

// countOf is "N blockers, M findings" of a list of blockers.
func countOf(es []blockerEntry) string {
	if len(es) == 0 {
		return "none"
	}
	n := 0
	for _, e := range es {
		n += e.api.count
	}
	return fmt.Sprintf("%d blocker%s, %d finding%s", len(es), plural(len(es)), n, plural(n))
}

// upgradeNote says where the upgrade's releases came from.
func upgradeNote(u Upgrade) string {
	current := "the cluster's release: unknown (no control-plane user agent in the input; --current-version gives it)"
	if !u.Current.IsZero() {
		current = "the cluster's release: " + u.Current.String() + " (" + u.CurrentWhy + ")"
	}
	if u.Target.IsZero() {
		return current + "; target: none (" + u.TargetWhy + ")"
	}
	return current + "; target: " + u.Target.String() + " (" + u.TargetWhy + ")"
}
