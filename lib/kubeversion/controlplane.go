package kubeversion

import (
	"slices"
	"strings"
	"time"
)

// ControlPlaneComponents are the programs whose release is the control plane's: their user
// agents ("kube-apiserver/v1.37.2 (linux/amd64) kubernetes/abc") name the release a cluster
// runs today. Kubelets and kube-proxy may lag behind it (the version-skew policy allows
// three minors), so they do not say what the control plane runs.
var ControlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "cloud-controller-manager"}

// IsControlPlane reports whether name is one of ControlPlaneComponents.
func IsControlPlane(name string) bool { return slices.Contains(ControlPlaneComponents, name) }

// Sighting is the newest release one component named, and when (event time).
type Sighting struct {
	Component string
	Version   Version
	At        time.Time
}

// ControlPlane follows the releases the control plane's components name in their user
// agents, the newest sighting of each. The zero value is ready to use; it is not safe for
// concurrent use.
type ControlPlane struct {
	seen map[string]Sighting // by component
}

// Observe reads the user and user agent of an event at time at: a control-plane component's
// release replaces the one it named before when at is newer (a rollback shows as the older
// release, seen later). Any client can send any user agent, so only the component's own
// identity counts: system:apiserver, system:kube-controller-manager, system:kube-scheduler,
// or a kube-system service account (the controllers' and the cloud controller manager's). It
// reports whether the event named the control plane's release.
func (c *ControlPlane) Observe(user, ua string, at time.Time) bool {
	if len(ua) < 5 || ua[:5] != "kube-" && ua[:5] != "cloud" {
		return false // the common case, kept cheap: most agents are not the control plane's
	}
	name, v, ok := Agent(ua)
	i := slices.Index(ControlPlaneComponents, name)
	if !ok || i < 0 || !controlPlaneUser(name, user) {
		return false
	}
	// The catalogue's own string: ua may live only as long as the event it came from.
	name = ControlPlaneComponents[i]
	c.add(Sighting{Component: name, Version: v, At: at})
	return true
}

// controlPlaneUser reports whether user is an identity component name runs as.
func controlPlaneUser(name, user string) bool {
	switch {
	case strings.HasPrefix(user, "system:serviceaccount:kube-system:"):
		return name != "kube-apiserver"
	case name == "kube-apiserver":
		return user == "system:apiserver"
	}
	return user == "system:"+name
}

func (c *ControlPlane) add(s Sighting) {
	if c.seen == nil {
		c.seen = map[string]Sighting{}
	}
	if old, ok := c.seen[s.Component]; ok && s.At.Before(old.At) {
		return
	}
	// Two releases at the same time (events of one second): the newer release wins, so the
	// result does not depend on the order the events were read in.
	if old, ok := c.seen[s.Component]; ok && s.At.Equal(old.At) && s.Version.Less(old.Version) {
		return
	}
	c.seen[s.Component] = s
}

// Merge adds the sightings of o (another reader's share of the same log).
func (c *ControlPlane) Merge(o *ControlPlane) {
	for _, s := range o.seen {
		c.add(s)
	}
}

// Sightings are the newest sighting of each component, by component name.
func (c *ControlPlane) Sightings() []Sighting {
	out := make([]Sighting, 0, len(c.seen))
	for _, s := range c.seen {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Sighting) int {
		if a.Component < b.Component {
			return -1
		}
		if a.Component > b.Component {
			return 1
		}
		return 0
	})
	return out
}

// Version is the release the control plane runs, zero when no component named one: the
// kube-apiserver's newest sighting when it has one, else the newest release among the other
// components' newest sightings (during an upgrade the apiserver moves first, and the others
// follow it).
func (c *ControlPlane) Version() Version {
	return CurrentOf(c.Sightings())
}

// CurrentOf is ControlPlane.Version of sightings (one per component, as the store keeps them).
func CurrentOf(sightings []Sighting) Version {
	s, _ := CurrentSighting(sightings)
	return s.Version
}

// CurrentSighting is the sighting the control plane's release is read from: the
// kube-apiserver's, else the one of the newest release among the other components (the
// newest of those when several name it); false when there is none.
func CurrentSighting(sightings []Sighting) (Sighting, bool) {
	var best Sighting
	found := false
	for _, s := range sightings {
		if s.Component == "kube-apiserver" {
			return s, true
		}
		if !found || best.Version.Less(s.Version) || s.Version == best.Version && s.At.After(best.At) {
			best, found = s, true
		}
	}
	return best, found
}
