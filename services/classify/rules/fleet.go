package rules

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"

	"github.com/valyala/fastjson"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// A sighting rule reports who does something, not each request that does it: a kubelet's
// release, a client of nodes/proxy, the ingress-nginx controller's agent. Its findings are
// keyed (Match.ID) by the caller, what was seen and the UTC day instead of the request's
// audit ID and with no request time, so the de-duplication that merges the stages of one
// request (package dedup, the bus's message ids, the store's identity) also keeps one finding
// per caller and day: a fleet of kubelets polling every ten seconds is a few findings a day,
// not millions, and a replay after a crash repeats the same keys. Its evidence (the request it
// was first seen in: agent, user, URI, audit ID) is added when its finding is built
// (FindingFrom), once per key, not per request.

// sightingID is the key of a sighting of what by the event's caller on the event's UTC day:
// "sighting-2026-12-05-<16 hex digits>", built in one allocation (every request of a polling
// kubelet makes one).
func (m *matcher) sightingID(rule, what string) string {
	// FNV-1a over the three strings, each ended by a zero byte (hash/fnv's, without its
	// allocations).
	h := uint64(14695981039346656037)
	for _, s := range [...]string{rule, what, m.ev.User.Username} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
		h *= 1099511628211 // ^ 0
	}
	var b [len("sighting-0000-00-00-") + 16]byte
	n := copy(b[:], "sighting-")
	y, mo, d := 0, 0, 0
	if t := m.ev.EventTime(); !t.IsZero() {
		var month time.Month
		y, month, d = t.UTC().Date()
		mo = int(month)
	}
	for _, f := range [...]struct{ v, w int }{{y, 4}, {mo, 2}, {d, 2}} {
		for i := f.w - 1; i >= 0; i-- {
			b[n+i] = byte('0' + f.v%10)
			f.v /= 10
		}
		n += f.w
		b[n] = '-'
		n++
	}
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], h)
	hex.Encode(b[n:], sum[:])
	return string(b[:])
}

// agent finds the components and programs known by their user agent: the version skew of
// kubelets, kube-proxies and kubectl, and the retired ingress-nginx controller.
func (m *matcher) agent() {
	ua := m.ev.UserAgent
	if ua == "" {
		return
	}
	if strings.HasPrefix(ua, ingressNginxAgent) && m.e.rules[IngressNginx] != nil {
		m.add(IngressNginx, Match{
			ID:     m.sightingID(IngressNginx, ingressNginxAgent),
			Detail: "the ingress-nginx controller's user agent", Value: ua,
		})
		return
	}
	for i := range m.e.cat.VersionSkew {
		s := &m.e.cat.VersionSkew[i]
		if !strings.HasPrefix(ua, s.Agent) || m.e.rules[s.Rule] == nil {
			continue
		}
		if len(s.Users) > 0 && !userIn(s.Users, m.ev.User.Username) {
			return // an agent anyone can write: believed only from the component's own user
		}
		_, v, ok := kubeversion.Agent(ua) // "kubelet/v1.33.4 ...": ok only with the "v"
		if !ok {
			return
		}
		release := ua[len(s.Agent)+1:]
		if i := strings.IndexByte(release, ' '); i >= 0 {
			release = release[:i]
		}
		t := m.e.skewText(i, v)
		mt := Match{
			ID: m.sightingID(s.Rule, t.resource),
			// The blocker is the component at a release ("kubelet 1.33"), its callers the
			// nodes or users that run it.
			APIGroup: "", APIVersion: "", Resource: t.resource,
			Detail: s.Component, Value: release, Until: t.until,
		}
		if s.Newer > 0 {
			// A client (kubectl): supported against kube-apiserver from Newer releases before
			// its own to Older after; it blocks no upgrade of the cluster, so no removal.
			mt.Since = t.since
		} else {
			mt.RemovedIn = t.removedIn
		}
		m.add(s.Rule, mt)
		return
	}
}

// skewText is what a version-skew finding says of a component's release: its blocker
// ("kubelet 1.33"), the kube-apiserver releases that support it (since, for a client, and
// until), and the first that does not (removedIn, for a component never newer).
type skewText struct{ resource, since, until, removedIn string }

// skewMinors are the releases 1.0 to 1.(skewMinors-1) whose texts NewEngine prepares: a
// kubelet's every request needs them, and preparing them once makes that free.
const skewMinors = 100

// skewTexts prepares the texts of the releases 1.0 to 1.99 of each version_skew row.
func skewTexts(c *Catalogue) [][]skewText {
	out := make([][]skewText, len(c.VersionSkew))
	for i := range c.VersionSkew {
		out[i] = make([]skewText, skewMinors)
		for minor := range skewMinors {
			out[i][minor] = newSkewText(&c.VersionSkew[i], kubeversion.Version{Major: 1, Minor: minor})
		}
	}
	return out
}

func newSkewText(s *SkewSpec, v kubeversion.Version) skewText {
	last := s.Supports(v)
	return skewText{
		resource:  s.Component + " " + v.String(),
		since:     kubeversion.Version{Major: v.Major, Minor: max(v.Minor-s.Newer, 0)}.String(),
		until:     last.String(),
		removedIn: last.Next().String(),
	}
}

// skewText returns the texts of release v of version_skew row i.
func (e *Engine) skewText(i int, v kubeversion.Version) skewText {
	if v.Major == 1 && v.Minor < skewMinors && i < len(e.skew) {
		return e.skew[i][v.Minor]
	}
	return newSkewText(&e.cat.VersionSkew[i], v)
}

// ingressNginxAgent starts the user agent of the ingress-nginx controller.
const ingressNginxAgent = "nginx-ingress-controller/"

// nodesProxy reports a client of the nodes/proxy subresource, once a day: it reaches every
// kubelet API (exec included) where nodes/metrics, nodes/pods or nodes/healthz would do
// (fine-grained kubelet authorization).
func (m *matcher) nodesProxy() {
	r := m.ev.ObjectRef
	if r == nil || r.Resource != "nodes" || r.Subresource != "proxy" || m.e.rules[NodesProxy] == nil {
		return
	}
	m.add(NodesProxy, Match{ID: m.sightingID(NodesProxy, "nodes/proxy"), Detail: r.Name, Value: m.ev.RequestURI})
}

// eviction reports an eviction refused with 429: a PodDisruptionBudget (or one not yet
// processed) blocks the drain of the pod's node.
func (m *matcher) eviction() {
	r := m.ev.ObjectRef
	st := m.ev.ResponseStatus
	if r == nil || r.Subresource != "eviction" || st == nil || st.Code != 429 || m.e.rules[EvictionBlocked] == nil {
		return
	}
	ev := []Evidence{{"objectRef.subresource", "eviction"}, {"responseStatus.code", "429"}, {"responseStatus.message", st.Message}}
	why, pdb := st.Message, disruptionBudget(st.Message)
	// The apiserver names the budget in a cause: {"reason":"DisruptionBudget","message":"The
	// disruption budget web-pdb needs 2 healthy pods and has 2 currently"}.
	if d, err := fastjson.ParseBytes(st.Details); err == nil {
		for i, c := range d.GetArray("causes") {
			if string(c.GetStringBytes("reason")) != "DisruptionBudget" {
				continue
			}
			msg := string(c.GetStringBytes("message"))
			if name := disruptionBudget(msg); name != "" {
				why, pdb = strings.TrimSuffix(st.Message, ".")+": "+msg, name
				ev = append(ev, Evidence{"responseStatus.details.causes[" + itoa(i) + "].message", msg})
				break
			}
		}
	}
	m.add(EvictionBlocked, Match{Detail: pdb, Value: why, Evidence: ev})
}

// disruptionBudget is the PodDisruptionBudget an eviction's refusal names ("The disruption
// budget web-pdb needs 2 healthy pods ..."), or "".
func disruptionBudget(msg string) string {
	const lead = "disruption budget "
	i := strings.Index(msg, lead)
	if i < 0 {
		return ""
	}
	name := msg[i+len(lead):]
	if j := strings.IndexAny(name, " ,.:;\"'"); j >= 0 {
		name = name[:j]
	}
	if name == "" || name == "is" || name == "for" {
		return ""
	}
	return name
}
