package scan

import (
	"fmt"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/classify/rules"
)

// Upgrade is the move a verdict is about: from the release the cluster runs (Current, zero
// when unknown) to Target, and the third-party components' targets. What it blocks is split
// in two: what the upgrade breaks (removed after Current, at or before Target) and what is
// failing already (removed at or before Current: those calls get 404 today).
type Upgrade struct {
	Current, Target kubeversion.Version
	// CurrentWhy and TargetWhy say where each came from ("--current-version", "the
	// kube-apiserver's user agent", "the next release after 1.37"), for the summary.
	CurrentWhy, TargetWhy string
	Components            ComponentTargets
}

// Breaks is what an upgrade does with one finding's removal.
type Breaks int

const (
	// NotBlocking: nothing removed, or removed after the target.
	NotBlocking Breaks = iota
	// BreaksOnUpgrade: removed by the target, still served by the current release (or the
	// current release is unknown): what the upgrade breaks.
	BreaksOnUpgrade
	// FailingNow: removed at or before the current release: the cluster already answers 404.
	FailingNow
)

// Of judges removedIn (a Kubernetes release, or "<component> <release>" for a third-party
// component's CRD, compared with that component's target).
func (u Upgrade) Of(removedIn string) Breaks {
	if !BlocksFor(removedIn, u.Target, u.Components) {
		return NotBlocking
	}
	if u.Current.IsZero() || strings.Contains(removedIn, " ") {
		return BreaksOnUpgrade
	}
	if removed, err := kubeversion.Parse(removedIn); err == nil && !u.Current.Less(removed) {
		return FailingNow
	}
	return BreaksOnUpgrade
}

// Name is "1.37 to 1.38", or "1.38" when the current release is unknown.
func (u Upgrade) Name() string {
	switch {
	case u.Target.IsZero():
		return "any release"
	case u.Current.IsZero():
		return u.Target.String()
	}
	return u.Current.String() + " to " + u.Target.String()
}

// ResolveUpgrade chooses the target of a command that judges findings: target when given
// (target must be one the catalogue can judge, and after current when current was given),
// else the release after current when the catalogue can judge it, else the newest release it
// can judge (the zero version when the catalogue names no release: any removal blocks).
// currentGiven says current came from a flag, not from the log.
func ResolveUpgrade(cat *rules.Catalogue, current, target kubeversion.Version, currentWhy string, currentGiven bool) (Upgrade, error) {
	u := Upgrade{Current: current, Target: target, CurrentWhy: currentWhy, TargetWhy: "--target-version"}
	if !target.IsZero() {
		if err := cat.CheckTarget(target); err != nil {
			return u, fmt.Errorf("--target-version: %w", err)
		}
		if currentGiven && !current.Less(target) {
			return u, fmt.Errorf("--target-version %s is not after --current-version %s: an upgrade goes to a later release", target, current)
		}
		return u, nil
	}
	ts := cat.Targets()
	if len(ts) == 0 {
		u.TargetWhy = "no release in the catalogue: any removal blocks"
		return u, nil
	}
	newest := ts[len(ts)-1]
	switch next := current.Next(); {
	case current.IsZero():
		u.Target, u.TargetWhy = newest, "the newest release the catalogue judges (the cluster's release is unknown)"
	case newest.Less(next):
		u.Target, u.TargetWhy = newest, fmt.Sprintf("the newest release the catalogue judges (the cluster runs %s)", current)
	default:
		u.Target, u.TargetWhy = next, fmt.Sprintf("the release after %s, the cluster's", current)
	}
	return u, nil
}
