package weekly

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/console"
)

// FailingAt reports whether removedIn is at or before current, the release the cluster runs
// (zero: unknown, never; a removal that does not parse, never).
func FailingAt(removedIn string, current Version) bool {
	removed, err := kubeversion.Parse(removedIn)
	return !current.IsZero() && err == nil && !current.Less(removed)
}

// MarkFailingNow marks the blockers removed at or before current, the release the cluster
// runs (zero: unknown, nothing is marked): those calls already fail, answered 404, whatever
// the upgrade. It orders bs stably: what the upgrade breaks first, by the release that
// removes it (the first hop of an upgrade that skips releases first; see Hops), then what
// fails already, each in the order it had. It returns how many of each.
func MarkFailingNow(bs []Blocker, current Version) (breaks, failing int) {
	for i := range bs {
		b := &bs[i]
		b.FailingNow = FailingAt(b.RemovedIn, current)
		if b.FailingNow {
			failing++
		}
	}
	slices.SortStableFunc(bs, func(x, y Blocker) int {
		switch {
		case x.FailingNow == y.FailingNow:
			return 0
		case y.FailingNow:
			return -1
		}
		return 1
	})
	if !current.IsZero() {
		OrderByHop(bs)
	}
	return len(bs) - failing, failing
}

// PartsOf cuts bs (ordered by MarkFailingNow) into what the upgrade breaks and what fails
// already.
func PartsOf(bs []Blocker) (breaks, failing []Blocker) {
	i := slices.IndexFunc(bs, func(b Blocker) bool { return b.FailingNow })
	if i < 0 {
		return bs, nil
	}
	return bs[:i], bs[i:]
}

// Hop is one release of an upgrade that skips releases (1.35 to 1.38 goes through 1.36,
// 1.37 and 1.38): what it removes that is still in use.
type Hop struct {
	Release  Version   `json:"release"`
	Blockers []Blocker `json:"blockers"`
}

// Hops cuts what the upgrade from current to target breaks (bs, ordered by MarkFailingNow)
// into one Hop per release after current up to target, in order, each with the blockers
// that release removes (none: the hop needs nothing). Without a current release, or for a
// blocker whose removal does not parse, there is no hop to name: nil.
func Hops(bs []Blocker, current, target Version) []Hop {
	if current.IsZero() || !current.Less(target) || target.Major != current.Major {
		return nil
	}
	breaks, _ := PartsOf(bs)
	var hops []Hop
	for v := current.Next(); !target.Less(v); v = v.Next() {
		hops = append(hops, Hop{Release: v})
	}
	for _, b := range breaks {
		removed, err := kubeversion.Parse(b.RemovedIn)
		if err != nil || removed.Major != current.Major || removed.Minor <= current.Minor || target.Less(removed) {
			return nil
		}
		h := &hops[removed.Minor-current.Minor-1]
		h.Blockers = append(h.Blockers, b)
	}
	return hops
}

// OrderByHop orders what the upgrade breaks (the first part of bs, ordered by
// MarkFailingNow) by the release that removes it, oldest first, keeping the order within a
// release: the first hop's blockers first. What fails already stays last.
func OrderByHop(bs []Blocker) {
	breaks, _ := PartsOf(bs)
	slices.SortStableFunc(breaks, func(x, y Blocker) int {
		a, errA := kubeversion.Parse(x.RemovedIn)
		b, errB := kubeversion.Parse(y.RemovedIn)
		if errA != nil || errB != nil {
			return 0
		}
		return kubeversion.Compare(a, b)
	})
}

// TargetFor is the target a cluster is judged against when none is given, one default for
// every command: the release after the one cluster runs at at (console.Reader.ClusterRelease),
// else the newest release whose removals classify's rule catalogue knows (its heartbeats of the
// 30 days before at: the cluster's release is unknown); zero when neither is known. why says
// which, for the reader.
func TargetFor(ctx context.Context, db *sql.DB, table, cluster string, at time.Time) (target Version, why string, err error) {
	r := console.Reader{DB: db, Table: table}
	v, from, err := r.ClusterRelease(ctx, cluster, at)
	if err != nil {
		return Version{}, "", err
	}
	if !v.IsZero() {
		return v.Next(), fmt.Sprintf("the release after the cluster's %s (%s)", v, printable.String(from)), nil
	}
	cov, err := r.Coverage(ctx, cluster, console.Window{From: at.AddDate(0, 0, -30), To: at})
	if err != nil {
		return Version{}, "", err
	}
	if !cov.ReviewedThrough.IsZero() {
		return cov.ReviewedThrough, "the newest release classify's rule catalogue knows (the cluster's release is unknown)", nil
	}
	return Version{}, "", nil
}
