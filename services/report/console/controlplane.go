package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/rollup"
)

// controlPlaneTable is the table of the control plane's sightings (from classify's
// heartbeats) beside the findings table t ("findings" or "db.findings").
func controlPlaneTable(t string) string {
	return t[:strings.LastIndexByte(t, '.')+1] + "control_plane_sightings"
}

// releaseKey is the kubeversion Key of a stored release ("1.37", as the writer stores them)
// in SQL: it orders two releases seen in the same minute.
var releaseKey = `toUInt32OrZero(splitByChar('.', version)[1]) * ` + strconv.Itoa(kubeversion.MaxMinor+1) +
	` + toUInt32OrZero(splitByChar('.', version)[2])`

// maxComponents bounds the components ControlPlane reads (kubeversion.ControlPlaneComponents
// names four).
const maxComponents = 100

// ControlPlane returns, per control-plane component of cluster, the release of its newest
// sighting at or before until (two releases seen in the same minute, as during a rolling
// upgrade: the newer), sorted by component; nil when none was seen. At is the minute of that
// sighting. The store keeps the newest sighting of each release per day: a release seen both
// before and after until on until's own day counts as last seen the day before (exact for
// an until at the start of a day, or after the newest sightings).
func (r Reader) ControlPlane(ctx context.Context, cluster string, until time.Time) ([]kubeversion.Sighting, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	if cluster == "" {
		return nil, invalid("cluster is empty")
	}
	if until.Unix() < 0 || until.Unix() > 1<<32-1 {
		return nil, invalid("time %s: outside what ClickHouse stores", until)
	}
	var out []kubeversion.Sighting
	// The newest minute wins, and within it the newer release.
	err = each(ctx, r.DB, "control plane", `SELECT toString(component) AS c, argMax(version, (seen, `+releaseKey+`)), toUInt32(max(seen))
FROM `+controlPlaneTable(t)+`
WHERE cluster = ? AND seen <= toDateTime(?)
GROUP BY c
ORDER BY c
LIMIT ?`, []any{cluster, until.Unix(), maxComponents}, func(rows rollup.Row) error {
		var s kubeversion.Sighting
		var version string
		var seen uint32
		if err := rows.Scan(&s.Component, &version, &seen); err != nil {
			return err
		}
		// A version that does not parse is not a row the writer wrote: no release to tell.
		if v, err := kubeversion.Parse(version); err == nil {
			s.Version, s.At = v, unix(seen)
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// releaseWindow is how far before until ClusterRelease looks for kubelets and controller
// managers among the findings when the control plane was not seen.
const releaseWindow = 30 * 24 * time.Hour

// ClusterRelease is the Kubernetes release cluster runs at until, and why: the release its
// control plane named last (kubeversion.CurrentOf of ControlPlane: the kube-apiserver's,
// else the newest of the other components'), else the newest release a kubelet or
// controller manager named among the findings of the 30 days before until
// (ClusterVersion); zero and "" when neither tells.
func (r Reader) ClusterRelease(ctx context.Context, cluster string, until time.Time) (v kubeversion.Version, why string, err error) {
	ss, err := r.ControlPlane(ctx, cluster, until)
	if err != nil {
		return kubeversion.Version{}, "", err
	}
	if v := kubeversion.CurrentOf(ss); !v.IsZero() {
		return v, sightingWhy(ss), nil
	}
	v, err = r.ClusterVersion(ctx, cluster, Window{From: until.Add(-releaseWindow), To: until})
	if err != nil || v.IsZero() {
		return kubeversion.Version{}, "", err
	}
	return v, "the newest kubelet or controller manager agent among the findings", nil
}

// sightingWhy names the sighting of ss that their current release came from.
func sightingWhy(ss []kubeversion.Sighting) string {
	from, _ := kubeversion.CurrentSighting(ss)
	return fmt.Sprintf("the %s's user agent, seen %s", from.Component, from.At.UTC().Format("2006-01-02 15:04 UTC"))
}
