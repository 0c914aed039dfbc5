package scan

import (
	"fmt"
	"io"
	"strings"
	"time"

	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// position is where a line of an input is: its name ("stdin" for -) and line number (0: a
// pretty-printed document read whole).
type position struct {
	name string
	n    int
}

// ciKey groups the findings of --format sarif and junit: one rule, API and caller.
type ciKey struct {
	rule, api, removedIn, user, agent string
}

// ciGroup is the findings of one rule, API and caller: the first of them (its message and
// where it is) and how many there are, and how many block the upgrade.
type ciGroup struct {
	key   ciKey
	first *auditlensv1.Finding
	at    position
	count int
}

// ciReport collects the findings of a scan for --format sarif and junit, grouped by rule, API
// and caller (user and user agent) in the order each group is first found, so that a log of a
// million requests by a few callers gives a few results. Only the first finding of a group
// is kept.
type ciReport struct {
	groups map[ciKey]*ciGroup
	order  []*ciGroup
}

func (c *ciReport) add(f *auditlensv1.Finding, at position) {
	if c.groups == nil {
		c.groups = map[ciKey]*ciGroup{}
	}
	// The key's strings are the finding's own (copied from the event by the engine).
	k := ciKey{f.RuleId, apiName(f), f.RemovedIn, f.Username, f.UserAgent}
	g := c.groups[k]
	if g == nil {
		g = &ciGroup{key: k, first: f, at: at}
		c.groups[k] = g
		c.order = append(c.order, g)
	}
	g.count++
}

// results turns the groups into CIResults judged against u. stdin: "-" was an input, so the
// input named stdin is no file (its results have no physical location).
func (c *ciReport) results(u Upgrade, stdin bool) []CIResult {
	out := make([]CIResult, 0, len(c.order))
	for _, g := range c.order {
		f := g.first
		user := f.Username
		who := user
		if who == "" {
			who = "(no user)"
		}
		fqn := who
		if f.UserAgent != "" {
			fqn += " (" + f.UserAgent + ")"
		}
		api := g.key.api
		if api == "" {
			api = "(no API)"
		}
		msg := f.Message
		if f.Replacement != "" && !strings.Contains(strings.ToLower(msg), strings.ToLower(f.Replacement)) {
			msg += " Use instead: " + f.Replacement + "."
		}
		breaks := u.Of(g.key.removedIn)
		if breaks == FailingNow {
			msg += fmt.Sprintf(" Failing now: removed at or before %s, the cluster's release.", u.Current)
		}
		msg += fmt.Sprintf(" (%d matching request%s by this caller", g.count, plural(g.count))
		if g.count > 1 {
			msg += ", the first quoted"
		}
		msg += ")"
		blocking := 0
		if breaks != NotBlocking {
			blocking = g.count
		}
		props := map[string]any{
			"count": g.count, "blockingCount": blocking, "failingNow": breaks == FailingNow, "api": api, "username": user, "userAgent": f.UserAgent,
			"severity": SeverityName(f.Severity),
		}
		for k, v := range map[string]string{"removedIn": f.RemovedIn, "deprecatedIn": f.DeprecatedIn, "replacement": f.Replacement,
			"firstAuditID": f.AuditId} {
			if v != "" {
				props[k] = v
			}
		}
		if f.EventTime != nil {
			props["firstEventTime"] = f.EventTime.AsTime().UTC().Format(time.RFC3339Nano)
		}
		r := CIResult{
			RuleID: f.RuleId, Severity: SeverityName(f.Severity), Blocking: blocking > 0, Message: msg,
			Logical:    &SARIFLogicalLocation{Name: who, FullyQualifiedName: fqn, Properties: map[string]any{"username": user, "userAgent": f.UserAgent}},
			Case:       api + " by " + fqn,
			Properties: props,
		}
		if !(stdin && g.at.name == "stdin") {
			r.File, r.Line = g.at.name, g.at.n
		}
		out = append(out, r)
	}
	return out
}

// writeCI writes the findings as --format sarif or junit.
func (s *scanner) writeCI(w io.Writer) error {
	res := s.ci.results(s.up, s.stdinGiven)
	if s.cfg.Format == "sarif" {
		return WriteSARIF(w, s.engine.Catalogue(), res)
	}
	blocks := "blocks an upgrade to " + s.up.Name()
	if s.up.Target.IsZero() {
		blocks = "removed in some release (no target: any removal blocks)"
	}
	return WriteJUnit(w, JUnit{Suite: "classify scan", Blocks: blocks, InputErrors: s.failedInputs}, res)
}
