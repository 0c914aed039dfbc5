package rules

import (
	"regexp"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// API names one resource at one version of its group ("" for the core group).
type API struct{ Group, Version, Resource string }

// String is "group/version resource" ("v1 resource" for the core group).
func (a API) String() string { return groupVersion(a.Group, a.Version) + " " + a.Resource }

// APICaller is one caller (user and user agent) of one API version: what classify keeps a
// caller's moves and reads of every version by.
type APICaller struct {
	API         API
	User, Agent string
}

// Move says what one request tells of a caller's move from catalogued API versions to their
// successors: Old is the API it called when that is one of them, Replaces the APIs whose
// successor it called (with success). A caller whose newest call of an API is to its
// successor has moved off it: report then counts its earlier calls as fixed, not blocking.
type Move struct {
	Old      API
	IsOld    bool
	Replaces []API
	// Read is set for a get, list or watch; Missing for a call answered 404 (a version the
	// cluster does not serve).
	Read, Missing bool
	// Old and Replaces hold the catalogue's strings: they outlive the event.
}

// plainGroupVersion matches a replacement that is only a group/version ("apps/v1", "v1"):
// the same resource under another version.
var plainGroupVersion = regexp.MustCompile(`^([a-z0-9.-]+/)?v[0-9]+((alpha|beta)[0-9]+)?$`)

// successors maps each successor the catalogue names (group, version, resource) to the
// catalogued APIs it replaces. A replacement is "group/version" (the same resource) or
// "group/version Kind" (a kind resolved to its resource, as Endpoints' "discovery.k8s.io/v1
// EndpointSlice"); an API without one takes the most stable other served version of its
// resource. Anything else (prose, a component's CRD) names no successor a request can call.
func successors(e *Engine) map[API][]API {
	out := map[API][]API{}
	for i := range e.cat.APIs {
		a := &e.cat.APIs[i]
		if a.Component != "" {
			continue
		}
		repl := a.Replacement
		if repl == "" {
			repl = e.servedSuccessor(a.Group, a.Version, a.Resource)
		}
		gv, kind, _ := strings.Cut(strings.TrimSpace(repl), " ")
		if !plainGroupVersion.MatchString(gv) {
			continue
		}
		group, version, ok := strings.Cut(gv, "/")
		if !ok {
			group, version = "", gv
		}
		res := a.Resource
		if kind != "" {
			if strings.ContainsAny(kind, " ()") {
				continue
			}
			res = e.ResourceOf(group, version, kind)
		}
		to := API{group, version, res}
		if to == (API{a.Group, a.Version, a.Resource}) {
			continue
		}
		out[to] = append(out[to], API{a.Group, a.Version, a.Resource})
	}
	return out
}

// MoveOf says whether ev is a call of a catalogued API version that has a successor, or a
// successful call of such a successor (a response code under 400, or none logged yet). Most
// events are neither: a zero Move.
func (e *Engine) MoveOf(ev *auditevent.Event) Move {
	if len(e.successors) == 0 {
		return Move{}
	}
	if r := ev.ObjectRef; r != nil && r.Resource != "" && !e.moveResources[r.Resource] {
		return Move{} // most events: no catalogued API or successor has this resource
	}
	group, version, resource := apiOf(ev)
	if resource == "" {
		return Move{}
	}
	k := API{group, version, resource}
	mv := Move{Read: ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch",
		Missing: ev.ResponseStatus != nil && ev.ResponseStatus.Code == 404}
	// The catalogue's own strings: the event's point into its decoded line.
	mv.Old, mv.IsOld = e.hasSuccessor[k]
	if olds := e.successors[k]; len(olds) > 0 && (ev.ResponseStatus == nil || ev.ResponseStatus.Code < 400) {
		mv.Replaces = olds
	}
	return mv
}

// EnumeratorWindow is how long after a caller's read of a successor its read of the old
// version counts as a reader's of every served version (an enumerator-read finding: a cache
// or a backup that reads what discovery lists), not a use.
const EnumeratorWindow = 10 * time.Minute

// BothVersions names the caller of an enumerator-read found by its reads, not the catalogue.
const BothVersions = "it read the successor minutes before"

// ReadsEveryVersion reports whether a read of the old version at sec (Unix seconds) comes in
// the EnumeratorWindow after the caller's newest read of its successor, successor (0: none).
func ReadsEveryVersion(successor, sec int64) bool {
	return successor > 0 && successor <= sec && sec-successor <= int64(EnumeratorWindow/time.Second)
}

// AsEnumeratorRead makes m, the removed-api or deprecated-api finding of a read, an
// enumerator-read finding by who (a tool, or what tells the caller reads every version): a
// read that stops when the version is gone, which blocks nothing. It reports whether it did
// (not for another rule, nor when enumerator-read is off).
func (e *Engine) AsEnumeratorRead(m *Match, who string) bool {
	if m.Rule == nil || (m.Rule.ID != RemovedAPI && m.Rule.ID != DeprecatedAPI) || e.rules[EnumeratorRead] == nil {
		return false
	}
	enumerated(m, who)
	m.Rule = e.rules[EnumeratorRead]
	m.Severity, m.Confidence = severities[m.Rule.Severity], confidences[m.Rule.Confidence]
	return true
}

// enumerated rewrites an API match's fields as an enumerator-read's by who.
func enumerated(m *Match, who string) {
	m.Detail = who
	m.Value = "deprecated"
	if m.RemovedIn != "" {
		m.Value = "removed in " + m.RemovedIn
	}
	m.DeprecatedIn, m.RemovedIn, m.Component = "", "", ""
}
