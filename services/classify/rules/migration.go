package rules

import (
	"regexp"
	"strings"

	"github.com/auditlens/auditlens/lib/auditevent"
)

// API names one resource at one version of its group ("" for the core group).
type API struct{ Group, Version, Resource string }

// String is "group/version resource" ("v1 resource" for the core group).
func (a API) String() string { return groupVersion(a.Group, a.Version) + " " + a.Resource }

// Move says what one request tells of a caller's move from catalogued API versions to their
// successors: Old is the API it called when that is one of them, Replaces the APIs whose
// successor it called (with success). A caller whose newest call of an API is to its
// successor has moved off it: report then counts its earlier calls as fixed, not blocking.
type Move struct {
	Old      API
	IsOld    bool
	Replaces []API
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
	group, version, resource := apiOf(ev)
	if resource == "" {
		return Move{}
	}
	k := API{group, version, resource}
	var mv Move
	// The catalogue's own strings: the event's point into its decoded line.
	mv.Old, mv.IsOld = e.hasSuccessor[k]
	if olds := e.successors[k]; len(olds) > 0 && (ev.ResponseStatus == nil || ev.ResponseStatus.Code < 400) {
		mv.Replaces = olds
	}
	return mv
}
