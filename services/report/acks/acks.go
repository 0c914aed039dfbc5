// Package acks reads the acknowledgements file: accepted risks (a blocker pattern with a
// reason, who accepted it and until when) that take blockers off the readiness gate, the
// weekly report and the console until they expire.
package acks

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/yamlfile"
)

// SchemaVersion is the version of the file format this report reads.
const SchemaVersion = 1

// UnusedAfter is how long an acknowledgement may match nothing before it is reported.
const UnusedAfter = 30 * 24 * time.Hour

// RuleIDs are the rules a rule pattern may name (DESIGN's contract; more may be added).
var RuleIDs = []string{"removed-api", "deprecated-api", "psp", "seccomp-alpha-annotation", "apparmor-annotation",
	"csr-key-encipherment-non-rsa", "beta-node-label", "node-role-master-label", "service-topology-keys",
	"pod-security-violation", "legacy-auth-provider-client", "legacy-sa-token"}

// fileDoc is the file as written.
type fileDoc struct {
	SchemaVersion    int     `yaml:"schema_version"`
	Acknowledgements []entry `yaml:"acknowledgements"`
}

type entry struct {
	// Cluster, Rule, API, Username, UserAgent and Namespace are patterns: "*" matches any
	// run of characters, everything else itself; empty matches anything.
	Cluster   string `yaml:"cluster"`
	Rule      string `yaml:"rule"`
	API       string `yaml:"api"`
	Username  string `yaml:"username"`
	UserAgent string `yaml:"user_agent"`
	Namespace string `yaml:"namespace"`
	Reason    string `yaml:"reason"`
	By        string `yaml:"accepted_by"`
	Expires   string `yaml:"expires"`
}

// Ack is one acknowledgement.
type Ack struct {
	Cluster, Rule, API, Username, UserAgent, Namespace Pattern
	weekly.Acceptance
}

// Set is a parsed acknowledgements file; its zero value accepts nothing.
type Set struct {
	Acks []Ack
}

// Parse reads an acknowledgements file strictly: unknown keys, bad dates, patterns that
// cannot match, entries without reason or accepted_by are errors at file:line:column.
func Parse(name string, data []byte) (*Set, error) {
	var f fileDoc
	d, err := yamlfile.Decode(name, data, &f)
	if err != nil {
		return nil, err
	}
	if f.SchemaVersion != SchemaVersion {
		return nil, d.At("$.schema_version", "schema_version %d: this report reads schema_version %d", f.SchemaVersion, SchemaVersion)
	}
	s := &Set{}
	for i, e := range f.Acknowledgements {
		p := fmt.Sprintf("$.acknowledgements[%d]", i)
		if e.Rule == "" && e.API == "" {
			return nil, d.At(p, "acknowledgement %d names neither rule nor api: it would accept every blocker", i+1)
		}
		if strings.TrimSpace(e.Reason) == "" {
			return nil, d.At(p, "acknowledgement %d has no reason", i+1)
		}
		if strings.TrimSpace(e.By) == "" {
			return nil, d.At(p, "acknowledgement %d has no accepted_by", i+1)
		}
		a := Ack{Cluster: Pattern(e.Cluster), Rule: Pattern(e.Rule), API: Pattern(e.API), Username: Pattern(e.Username),
			UserAgent: Pattern(e.UserAgent), Namespace: Pattern(e.Namespace),
			Acceptance: weekly.Acceptance{By: e.By, Reason: e.Reason, Source: d.Line(p)}}
		if e.UserAgent != "" && strings.Trim(e.Username, "*") == "" {
			// The client chooses its user agent: alone it would accept anyone who sends it.
			return nil, d.At(p+".user_agent", "user_agent %q without a username: any client can send that agent, so it would accept "+
				"whoever does; name the callers by username (the authenticated identity, e.g. \"system:serviceaccount:vendor:*\"), "+
				"the user agent may narrow that", e.UserAgent)
		}
		if e.Rule != "" && !a.Rule.MatchesAny(RuleIDs) {
			return nil, d.At(p+".rule", "rule %q matches no rule id (%s)", e.Rule, strings.Join(RuleIDs, ", "))
		}
		if e.API != "" && !strings.Contains(e.API, "*") && !strings.Contains(e.API, " ") {
			return nil, d.At(p+".api", "api %q cannot match: an API is written \"group/version resource\" (\"v1 resource\" for the core group), e.g. \"extensions/v1beta1 ingresses\", or a pattern with *", e.API)
		}
		if e.Expires != "" {
			day, err := weekly.ParseDate(e.Expires)
			if err != nil {
				return nil, d.At(p+".expires", "expires %q: want a day YYYY-MM-DD", e.Expires)
			}
			if err := weekly.CheckWeekEnding(day); err != nil {
				return nil, d.At(p+".expires", "expires %s: %v", e.Expires, err)
			}
			a.Until = day
		}
		s.Acks = append(s.Acks, a)
	}
	return s, nil
}

// Pattern is yamlfile.Pattern: "*" matches any run of characters, "" anything.
type Pattern = yamlfile.Pattern

func (a Ack) hasCaller() bool { return a.Username != "" || a.UserAgent != "" || a.Namespace != "" }

func (a Ack) callerMatch(c weekly.Caller) bool {
	return a.Username.Match(c.Username) && a.UserAgent.Match(c.UserAgent) && a.Namespace.Match(c.Namespace)
}

// keyMatch reports whether a names b's rule and API.
func (a Ack) keyMatch(b weekly.Blocker) bool {
	return a.Rule.Match(b.RuleID) && a.API.Match(b.API())
}

// accepts reports whether a accepts all of b: its rule and API, and, when a names callers,
// every caller of b (all of them listed: a blocker with callers beyond its list is not
// accepted by caller patterns, since the unlisted ones are unknown).
func (a Ack) accepts(b weekly.Blocker) bool {
	if !a.keyMatch(b) {
		return false
	}
	if !a.hasCaller() {
		return true
	}
	if b.CallerCount > len(b.Callers) || len(b.Callers) == 0 {
		return false
	}
	for _, c := range b.Callers {
		if !a.callerMatch(c) {
			return false
		}
	}
	return true
}

// touches reports whether a matches some use of b (for Review: is it used at all).
func (a Ack) touches(b weekly.Blocker) bool {
	if !a.keyMatch(b) {
		return false
	}
	if !a.hasCaller() {
		return true
	}
	for _, c := range b.Callers {
		if a.callerMatch(c) {
			return true
		}
	}
	return false
}

// For is the Acceptor of one cluster's blockers.
func (s *Set) For(cluster string) weekly.Acceptor {
	if s == nil {
		return nil
	}
	return acceptor{s: s, cluster: cluster}
}

type acceptor struct {
	s       *Set
	cluster string
}

// Accept returns the acceptance of b: of the acknowledgements that accept it, one without
// expiry or with the latest expiry.
func (a acceptor) Accept(b weekly.Blocker) (weekly.Acceptance, bool) {
	var best *Ack
	for i := range a.s.Acks {
		k := &a.s.Acks[i]
		if !k.Cluster.Match(a.cluster) || !k.accepts(b) {
			continue
		}
		if best == nil || (!best.Until.IsZero() && (k.Until.IsZero() || k.Until.After(best.Until.Time))) {
			best = k
		}
	}
	if best == nil {
		return weekly.Acceptance{}, false
	}
	return best.Acceptance, true
}

// Review lists what to look at in the acknowledgements of cluster at now: those without an
// expiry, those expired (their blockers block again), and those that matched no use of
// anything with a removal release in the last UnusedAfter (read from db with the weekly
// report's blocker queries).
func (s *Set) Review(ctx context.Context, db *sql.DB, cluster string, now time.Time) ([]weekly.Notice, error) {
	if s == nil || len(s.Acks) == 0 {
		return nil, nil
	}
	var mine []Ack
	for _, a := range s.Acks {
		if a.Cluster.Match(cluster) {
			mine = append(mine, a)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	// Everything with a removal release: the latest target there can be.
	bs, err := weekly.Blockers(ctx, db, weekly.Window{Cluster: cluster, Target: weekly.Version{Major: 99, Minor: 999},
		Start: now.Add(-UnusedAfter), End: now, CallersPerBlocker: 1000})
	if err != nil {
		return nil, fmt.Errorf("review acknowledgements: %w", err)
	}
	var out []weekly.Notice
	for _, a := range mine {
		switch {
		case a.Until.IsZero():
			out = append(out, weekly.Notice{Source: a.Source, Message: "has no expiry: it accepts its blockers forever; give it an expires day"})
		case a.Expired(now):
			out = append(out, weekly.Notice{Source: a.Source, Message: fmt.Sprintf("expired on %s: what it accepted blocks again", a.Until)})
		}
		used := false
		for _, b := range bs {
			if a.touches(b) {
				used = true
				break
			}
		}
		if !used {
			out = append(out, weekly.Notice{Source: a.Source, Message: fmt.Sprintf("matched nothing in the last %d days: remove it, or fix its patterns", int(UnusedAfter.Hours()/24))})
		}
	}
	return out, nil
}

// Config names the acknowledgements file.
type Config struct {
	// Path of the file; empty: no acknowledgements.
	Path string
}

// RegisterFlags registers --acknowledgements-file.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Path, "acknowledgements-file", c.Path, "YAML `file` of accepted risks (examples/acknowledgements.yaml): the blockers it matches do not block until their expiry and are listed apart; reloaded when it changes, a refused version leaves the last good one in force")
}

// Open loads the file c names (nil, nil without one): its error stops a service at start.
func (c Config) Open(log *slog.Logger, onError func(error)) (*yamlfile.File[*Set], error) {
	return yamlfile.Open("--acknowledgements-file", c.Path, Parse, log, onError)
}

// Acceptor returns the acceptor of cluster from f's version in force; nil f accepts nothing.
func Acceptor(f *yamlfile.File[*Set]) func(cluster string) weekly.Acceptor {
	return func(cluster string) weekly.Acceptor {
		if f == nil {
			return nil
		}
		return f.Current().For(cluster)
	}
}
