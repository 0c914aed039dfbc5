package weekly

import (
	"slices"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// MarkFailingNow marks the blockers removed at or before current, the release the cluster
// runs (zero: unknown, nothing is marked): those calls already fail, answered 404, whatever
// the upgrade. It orders bs stably: what the upgrade breaks first, then what fails already,
// each part in the order it had. It returns how many of each.
func MarkFailingNow(bs []Blocker, current Version) (breaks, failing int) {
	for i := range bs {
		b := &bs[i]
		removed, err := kubeversion.Parse(b.RemovedIn)
		b.FailingNow = !current.IsZero() && err == nil && !current.Less(removed)
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
