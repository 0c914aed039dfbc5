package console

import (
	"context"
	"slices"
	"strings"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/rollup"
)

// FleetRelease is how many callers last ran one release of a component in a window: nodes
// for kubelet and kube-proxy, users for kubectl (classify's version-skew sightings).
type FleetRelease struct {
	Component string
	Release   kubeversion.Version
	Callers   uint64
}

// maxFleetRows bounds the releases Fleet reads (three components, a few releases each).
const maxFleetRows = 1000

// Fleet is the version spread of cluster's node components and clients in w, by component
// (sorted) and release (oldest first): each caller counted once, at the release of its
// newest sighting in w (a node upgraded within the window counts at its new release).
func (r Reader) Fleet(ctx context.Context, cluster string, w Window) ([]FleetRelease, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return nil, err
	}
	var out []FleetRelease
	// resource is "<component> <release>" (classify's rules.VersionSkew); the sightings are
	// few (one per caller, release and day) and rule_id is in the table's sort key.
	err = each(ctx, r.DB, "fleet", `SELECT comp, rel, toUInt64(count()) AS n
FROM (
  SELECT username, splitByChar(' ', toString(resource))[1] AS comp,
    argMax(splitByChar(' ', toString(resource))[2], event_time) AS rel
  FROM `+t+`
  WHERE cluster = ? AND rule_id IN ('version-skew', 'kubectl-version-skew')
    AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
  GROUP BY username, comp
)
GROUP BY comp, rel
ORDER BY comp, rel
LIMIT ?`, []any{cluster, w.From.Unix(), w.To.Unix(), maxFleetRows}, func(rows rollup.Row) error {
		var f FleetRelease
		var rel string
		if err := rows.Scan(&f.Component, &rel, &f.Callers); err != nil {
			return err
		}
		// A release that does not parse is not a sighting classify wrote: nothing to tell.
		if v, perr := kubeversion.Parse(rel); perr == nil && f.Component != "" {
			f.Release = v
			out = append(out, f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Releases sort as numbers (1.9 before 1.10), not as the strings SQL ordered.
	slices.SortStableFunc(out, func(a, b FleetRelease) int {
		if c := strings.Compare(a.Component, b.Component); c != 0 {
			return c
		}
		return kubeversion.Compare(a.Release, b.Release)
	})
	return out, nil
}
