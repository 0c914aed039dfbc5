// Package owners reads the owners file, which maps callers (namespace, service account or
// user, user agent) to teams with e-mail addresses, and cuts a weekly report down to one
// team's callers.
package owners

import (
	"flag"
	"fmt"
	"log/slog"
	"net/mail"
	"regexp"
	"strings"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/schedule"
	"github.com/auditlens/auditlens/services/report/yamlfile"
)

// SchemaVersion is the version of the file format this report reads.
const SchemaVersion = 1

type fileDoc struct {
	SchemaVersion int    `yaml:"schema_version"`
	Teams         []team `yaml:"teams"`
}

type team struct {
	Name       string   `yaml:"name"`
	Email      []string `yaml:"email"`
	Namespaces []string `yaml:"namespaces"`
	// NamespaceLabels match the labels of the request's namespace, read from the cluster
	// (--owners-namespace-labels): every label given must be there with its value.
	NamespaceLabels map[string]string `yaml:"namespace_labels"`
	Usernames       []string          `yaml:"usernames"`
	UserAgents      []string          `yaml:"user_agents"`
}

// Team is one team and the callers it owns. Each list holds patterns ("*" any run of
// characters): Usernames match the user (a service account is
// system:serviceaccount:NAMESPACE:NAME, so "system:serviceaccount:web:*" is every service
// account of namespace web), UserAgents the user agent, Namespaces the namespace of the
// request.
type Team struct {
	Name                              string
	Email                             []string
	Namespaces, Usernames, UserAgents []yamlfile.Pattern
	NamespaceLabels                   map[string]string
	Source                            string
}

// Owners is a parsed owners file; its zero value owns nothing.
type Owners struct {
	Teams []Team
	// labels returns the labels of a namespace (nil: namespace labels are not read).
	labels func(namespace string) map[string]string
}

// WithLabels is o matching namespace_labels against the labels labels returns.
func (o *Owners) WithLabels(labels func(namespace string) map[string]string) *Owners {
	if o == nil {
		return nil
	}
	c := *o
	c.labels = labels
	return &c
}

func (o *Owners) labelsMatch(t Team, namespace string) bool {
	if len(t.NamespaceLabels) == 0 || o.labels == nil || namespace == "" {
		return false
	}
	have := o.labels(namespace)
	for k, v := range t.NamespaceLabels {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

var (
	teamName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
	labelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
)

// Parse reads an owners file strictly: unknown keys, a team without a name, an e-mail
// address or a selector, a bad address, a pattern that cannot match (empty, or a bare "*"
// that would own every caller) are errors at file:line:column.
func Parse(name string, data []byte) (*Owners, error) {
	var f fileDoc
	d, err := yamlfile.Decode(name, data, &f)
	if err != nil {
		return nil, err
	}
	if f.SchemaVersion != SchemaVersion {
		return nil, d.At("$.schema_version", "schema_version %d: this report reads schema_version %d", f.SchemaVersion, SchemaVersion)
	}
	o := &Owners{}
	seen := map[string]bool{}
	for i, t := range f.Teams {
		p := fmt.Sprintf("$.teams[%d]", i)
		if !teamName.MatchString(t.Name) {
			return nil, d.At(p+".name", "team name %q: want lower-case letters, digits, '.', '_' or '-' (at most 63)", t.Name)
		}
		if seen[t.Name] {
			return nil, d.At(p+".name", "team %q defined twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Email) == 0 {
			return nil, d.At(p, "team %s has no email", t.Name)
		}
		for j, e := range t.Email {
			if a, err := mail.ParseAddress(e); err != nil || a.Address != e {
				return nil, d.At(fmt.Sprintf("%s.email[%d]", p, j), "team %s: email %q: want one plain address, e.g. team@example.com", t.Name, e)
			}
		}
		if len(t.Namespaces)+len(t.Usernames)+len(t.UserAgents)+len(t.NamespaceLabels) == 0 {
			return nil, d.At(p, "team %s owns nothing: give it namespaces, namespace_labels, usernames or user_agents", t.Name)
		}
		for k := range t.NamespaceLabels {
			if !labelKey.MatchString(k) {
				return nil, d.At(p+".namespace_labels", "team %s: label key %q cannot match: not a Kubernetes label key", t.Name, k)
			}
		}
		tm := Team{Name: t.Name, Email: t.Email, NamespaceLabels: t.NamespaceLabels, Source: d.Line(p)}
		for _, l := range []struct {
			key string
			in  []string
			out *[]yamlfile.Pattern
		}{{"namespaces", t.Namespaces, &tm.Namespaces}, {"usernames", t.Usernames, &tm.Usernames}, {"user_agents", t.UserAgents, &tm.UserAgents}} {
			for j, s := range l.in {
				if strings.Trim(s, "*") == "" {
					return nil, d.At(fmt.Sprintf("%s.%s[%d]", p, l.key, j), "team %s: %s pattern %q would own every caller", t.Name, l.key, s)
				}
				if strings.TrimSpace(s) != s {
					return nil, d.At(fmt.Sprintf("%s.%s[%d]", p, l.key, j), "team %s: %s pattern %q has leading or trailing blanks: it cannot match", t.Name, l.key, s)
				}
				*l.out = append(*l.out, yamlfile.Pattern(s))
			}
		}
		o.Teams = append(o.Teams, tm)
	}
	return o, nil
}

func anyMatch(ps []yamlfile.Pattern, s string) bool {
	for _, p := range ps {
		if p.Match(s) {
			return true
		}
	}
	return false
}

// Owner is the team that owns a caller, "" when none does. The caller's identity decides
// first (the first team whose usernames match), then the namespace of the request (its name,
// then its labels), and only then its user agent: a team's service account acting in another
// team's namespace stays its own, and a user agent, which the client chooses, never takes a
// caller from the team its identity or namespace gives it.
func (o *Owners) Owner(username, userAgent, namespace string) string {
	if o == nil {
		return ""
	}
	for _, by := range []func(Team) bool{
		func(t Team) bool { return anyMatch(t.Usernames, username) },
		func(t Team) bool { return namespace != "" && anyMatch(t.Namespaces, namespace) },
		func(t Team) bool { return o.labelsMatch(t, namespace) },
		func(t Team) bool { return anyMatch(t.UserAgents, userAgent) },
	} {
		for _, t := range o.Teams {
			if by(t) {
				return t.Name
			}
		}
	}
	return ""
}

// Team returns the team named name.
func (o *Owners) Team(name string) (Team, bool) {
	if o != nil {
		for _, t := range o.Teams {
			if t.Name == name {
				return t, true
			}
		}
	}
	return Team{}, false
}

// Filter returns a copy of r with only team's callers: the blockers they use (with their
// findings and callers only), the accepted blockers they use, and their new and resolved
// callers. Trend and totals stay the cluster's. r should list every caller of its blockers
// (Options.CallersPerBlocker high enough); each blocker keeps at most perBlocker callers.
func (o *Owners) Filter(r *weekly.Report, team string, perBlocker int) *weekly.Report {
	c := *r
	mine := func(username, ua, ns string) bool { return o.Owner(username, ua, ns) == team }
	cut := func(b weekly.Blocker) (weekly.Blocker, bool) {
		var cs []weekly.Caller
		var n uint64
		for _, cl := range b.Callers {
			if mine(cl.Username, cl.UserAgent, cl.Namespace) {
				cs = append(cs, cl)
				n += cl.Count
			}
		}
		if len(cs) == 0 {
			return b, false
		}
		if len(cs) < b.CallerCount {
			// The blocker's message is one finding's, naming its caller, who may be another
			// team's: the team reads one of its own.
			b.Message = teamMessage(b)
		}
		b.CallerCount, b.Findings = len(cs), n
		b.Callers = cs[:min(len(cs), perBlocker)]
		return b, true
	}
	c.Blockers = []weekly.Blocker{}
	for _, b := range r.Blockers {
		if nb, ok := cut(b); ok {
			c.Blockers = append(c.Blockers, nb)
		}
	}
	c.Accepted = nil
	for _, a := range r.Accepted {
		if nb, ok := cut(a.Blocker); ok {
			a.Blocker = nb
			c.Accepted = append(c.Accepted, a)
		}
	}
	changes := func(in []weekly.Change) []weekly.Change {
		out := []weekly.Change{}
		for _, ch := range in {
			if mine(ch.Username, ch.UserAgent, ch.Namespace) {
				out = append(out, ch)
			}
		}
		return out
	}
	c.New, c.Resolved = changes(r.New), changes(r.Resolved)
	c.NewCount, c.ResolvedCount = len(c.New), len(c.Resolved)
	c.Totals.BlockerCallers = 0
	for _, b := range c.Blockers {
		c.Totals.BlockerCallers += b.CallerCount
	}
	return &c
}

// teamMessage says what b is without naming a caller: a team's cut of a blocker that other
// teams' callers use too.
func teamMessage(b weekly.Blocker) string {
	what := b.API()
	if what == "" {
		what = b.RuleID
	}
	s := what + " (" + b.RuleID + ")"
	if b.RemovedIn != "" {
		s += ": removed in " + b.RemovedIn
	}
	if b.Replacement != "" {
		s += "; use " + b.Replacement
	}
	return s + ". The callers listed are this team's."
}

// Split is the weekly delivery of r to the platform (everything, the unowned included) and to
// each team with callers in r (only theirs).
func (o *Owners) Split(r *weekly.Report, platform []string, perBlocker int) []schedule.Addressed {
	out := []schedule.Addressed{{Name: "platform", Recipients: platform, Report: capCallers(r, perBlocker)}}
	if o == nil {
		return out
	}
	for _, t := range o.Teams {
		tr := o.Filter(r, t.Name, perBlocker)
		if len(tr.Blockers) == 0 && len(tr.Accepted) == 0 && len(tr.New) == 0 && len(tr.Resolved) == 0 {
			continue
		}
		tr.Cluster = r.Cluster
		out = append(out, schedule.Addressed{Name: t.Name, Recipients: t.Email, Report: tr})
	}
	return out
}

// capCallers is r with at most perBlocker callers per blocker.
func capCallers(r *weekly.Report, perBlocker int) *weekly.Report {
	c := *r
	c.Blockers = make([]weekly.Blocker, len(r.Blockers))
	for i, b := range r.Blockers {
		b.Callers = b.Callers[:min(len(b.Callers), perBlocker)]
		c.Blockers[i] = b
	}
	return &c
}

// Config names the owners file.
type Config struct {
	Path string
	// NamespaceLabels reads the namespaces' labels from the cluster for namespace_labels.
	NamespaceLabels bool
}

// RegisterFlags registers --owners-file.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.NamespaceLabels, "owners-namespace-labels", c.NamespaceLabels, "read the namespaces' labels from the cluster (--report-kube-url, or in-cluster; list on namespaces) every --report-files-reload, for the owners file's namespace_labels")
	fs.StringVar(&c.Path, "owners-file", c.Path, "YAML `file` mapping callers to teams (examples/owners.yaml): each team gets the weekly report of its own callers, --mail-to everything; the console filters by team; reloaded when it changes, a refused version leaves the last good one in force")
}

// Open loads the file c names (nil, nil without one).
func (c Config) Open(log *slog.Logger, onError func(error)) (*yamlfile.File[*Owners], error) {
	return yamlfile.Open("--owners-file", c.Path, Parse, log, onError)
}

// TeamNames are the teams, in the file's order.
func (o *Owners) TeamNames() []string {
	if o == nil {
		return nil
	}
	out := make([]string, len(o.Teams))
	for i, t := range o.Teams {
		out[i] = t.Name
	}
	return out
}
