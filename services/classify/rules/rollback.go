package rules

import (
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
)

// Rollback readiness: a cluster upgraded to a release can go back to the one before only if
// nothing it runs needs what the newer release added. The rollback-api rule reports who uses
// an API version a recent release introduced (the catalogue's served introduced_in), once per
// caller, API and day (a sighting):
//   - when the release below serves another version of the resource, the objects survive a
//     rollback (Kubernetes keeps the storage version at one the release below reads) but
//     this caller's calls of the new version fail there (404) until it moves back;
//   - when it serves no version of it, what was stored through it is not served at all.
//
// Kubernetes' own components are left out: they go back with the control plane and the
// nodes (the apiserver, the controller manager and scheduler, kubelets, kube-proxy).

// RollbackReleases is how many of the catalogue's newest releases the rule looks at: the
// newest release its data was read from, the three before it and a pre-release after it, the
// releases a cluster can still be rolled back from under upstream support. An API older than
// them has been in every release a supported cluster could go back to.
const RollbackReleases = 4

// IntroducedInEvidence is the evidence path of a rollback-api finding that names the release
// that introduced the API called (the finding's readers judge a rollback by it).
const IntroducedInEvidence = "catalogue.served.introduced_in"

// IntroducedIn is the release that introduced the API of a rollback-api finding, or "".
func IntroducedIn(f *auditlensv1.Finding) string {
	for _, e := range f.Evidence {
		if e.Path == IntroducedInEvidence {
			return e.Value
		}
	}
	return ""
}

// RollbackFloor is the oldest release whose introductions the rule follows: the catalogue's
// newest release and the RollbackReleases-1 before it. ok is false when the catalogue names no
// newest release.
func RollbackFloor(c *Catalogue) (floor kubeversion.Version, ok bool) {
	newest, err := kubeversion.Parse(c.NewestRelease)
	if err != nil {
		return floor, false
	}
	return kubeversion.Version{Major: newest.Major, Minor: max(newest.Minor-(RollbackReleases-1), 0)}, true
}

// rollbackSpec is what the rule knows of one served API version.
type rollbackSpec struct {
	introduced string
	// older: the release before introduced serves another version of the resource (one
	// served today and older, or one removed since but not by then).
	older bool
}

// rollbackAPIs maps the served API versions introduced in the newest RollbackReleases
// releases to their spec.
func rollbackAPIs(c *Catalogue) map[gvr]rollbackSpec {
	floor, ok := RollbackFloor(c)
	if !ok {
		return nil
	}
	out := map[gvr]rollbackSpec{}
	for i := range c.Served {
		s := &c.Served[i]
		intro, err := kubeversion.Parse(s.IntroducedIn)
		if err != nil || intro.Less(floor) {
			continue
		}
		spec := rollbackSpec{introduced: s.IntroducedIn}
		for j := range c.Served {
			o := &c.Served[j]
			if j == i || o.Group != s.Group || o.Resource != s.Resource {
				continue
			}
			if v, err := kubeversion.Parse(o.IntroducedIn); o.IntroducedIn == "" || (err == nil && v.Less(intro)) {
				spec.older = true
			}
		}
		for j := range c.APIs { // a version removed since, but served by the release below
			a := &c.APIs[j]
			if r, err := kubeversion.Parse(a.RemovedIn); err == nil && a.Group == s.Group && a.Resource == s.Resource && !r.Less(intro) {
				spec.older = true
			}
		}
		out[gvr{s.Group, s.Version, s.Resource}] = spec
	}
	return out
}

// kubernetesComponent reports whether user is part of Kubernetes itself, which a rollback
// takes back with it: the control plane, a kubelet, kube-proxy.
func kubernetesComponent(user, ua string) bool {
	return controlPlaneCaller(user, ua) || strings.HasPrefix(user, "system:node:") || user == "system:kube-proxy"
}

// rollback reports a successful call of an API version a recent release introduced.
func (m *matcher) rollback() {
	if m.resource == "" || len(m.e.rollback) == 0 || m.e.rules[RollbackAPI] == nil {
		return
	}
	spec, ok := m.e.rollback[gvr{m.group, m.version, m.resource}]
	if !ok || kubernetesComponent(m.ev.User.Username, m.ev.UserAgent) {
		return
	}
	st := m.ev.ResponseStatus
	if st == nil || st.Code < 200 || st.Code > 299 {
		return // not answered yet (RequestReceived), or refused: nothing was served
	}
	mt := Match{
		ID:    m.sightingID(RollbackAPI, m.group+"/"+m.version+"/"+m.resource),
		Since: spec.introduced, Detail: m.ev.Verb,
		Value: "its calls of this version fail there (404) until it moves back to a version that release serves; the objects survive",
		Evidence: []Evidence{
			{"objectRef.apiGroup", m.group}, {"objectRef.apiVersion", m.version}, {"objectRef.resource", m.resource}, {"verb", m.ev.Verb},
			{IntroducedInEvidence, spec.introduced},
		},
	}
	if !spec.older {
		mt.Value = "that release serves no version of " + m.resource + ": what is stored through it is not served there"
		mt.Severity = auditlensv1.Severity_SEVERITY_WARNING
	}
	m.add(RollbackAPI, mt)
}
