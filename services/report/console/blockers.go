package console

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/rollup"
)

// Blocker is one thing that blocks the target (a rule and the API it is about) with its
// busiest callers.
type Blocker struct {
	Key         BlockerKey
	RemovedIn   string
	Replacement string
	// Requests counts its findings in the window, each once; Callers the distinct (user,
	// user agent, source IP).
	Requests, Callers uint64
	LastSeen          time.Time
	Top               []Caller
}

// TopCallers is how many callers each blocker lists.
const TopCallers = 3

// maxBlockers caps the blockers listed for one cluster.
const maxBlockers = 100

// Blockers lists what blocks target in cluster's window, busiest first, each with its
// TopCallers busiest callers. Counts are exact: a request has one caller, so a blocker's
// requests are its callers' requests (read from the day rows of package rollup).
func (r Reader) Blockers(ctx context.Context, cluster string, w Window, target kubeversion.Version) ([]Blocker, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return nil, err
	}
	if target.IsZero() {
		return nil, invalid("target version is not set")
	}
	src, args, err := r.days(ctx, t, cluster, w, blocking, target.Key())
	if err != nil {
		return nil, err
	}
	var out []Blocker
	index := map[BlockerKey]int{}
	err = each(ctx, r.DB, "blockers", `SELECT rule_id, api_group, api_version, resource, any(removed_in), any(replacement),
  toUInt64(sum(findings)) AS n, toUInt64(uniqExact(username, user_agent, source_ip)), toUInt32(max(last_seen))
FROM (`+src+`)
GROUP BY rule_id, api_group, api_version, resource
ORDER BY n DESC, rule_id, api_group, api_version, resource
LIMIT ?`, append(args, maxBlockers), func(rows *sql.Rows) error {
		var b Blocker
		var last uint32
		if err := rows.Scan(&b.Key.Rule, &b.Key.Group, &b.Key.Version, &b.Key.Resource, &b.RemovedIn, &b.Replacement,
			&b.Requests, &b.Callers, &last); err != nil {
			return err
		}
		b.LastSeen = unix(last)
		index[b.Key] = len(out)
		out = append(out, b)
		return nil
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	err = each(ctx, r.DB, "top callers", `SELECT rule_id, api_group, api_version, resource, username, user_agent, source_ip,
  toUInt64(sum(findings)) AS n, toUInt32(min(first_seen)), toUInt32(max(last_seen)), `+callerID+`
FROM (`+src+`)
GROUP BY rule_id, api_group, api_version, resource, username, user_agent, source_ip
ORDER BY n DESC, username, user_agent, source_ip
LIMIT ? BY rule_id, api_group, api_version, resource`, append(args, TopCallers), func(rows *sql.Rows) error {
		var k BlockerKey
		var c Caller
		var first, last uint32
		if err := rows.Scan(&k.Rule, &k.Group, &k.Version, &k.Resource, &c.Username, &c.UserAgent, &c.SourceIP,
			&c.Findings, &first, &last, &c.ID); err != nil {
			return err
		}
		c.FirstSeen, c.LastSeen = unix(first), unix(last)
		if i, ok := index[k]; ok {
			out[i].Top = append(out[i].Top, c)
		}
		return nil
	})
	return out, err
}

// ClusterVersion is the newest release a kubelet or controller-manager of cluster named in
// its user agent in the window, zero when none did.
func (r Reader) ClusterVersion(ctx context.Context, cluster string, w Window) (kubeversion.Version, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return kubeversion.Version{}, err
	}
	var best kubeversion.Version
	// The user agents of the day rows' states: the distinct values need no merging.
	from, to := rollup.Span(w.From, w.To)
	err = each(ctx, r.DB, "cluster version", `SELECT DISTINCT substring(user_agent, 1, 64) FROM `+rollup.TablesFor(t).State+`
WHERE cluster = ? AND day >= toDate(?) AND day < toDate(?)
  AND (startsWith(user_agent, 'kubelet/v') OR startsWith(user_agent, 'kube-controller-manager/v'))
LIMIT 1000`, []any{cluster, rollup.Day(from), rollup.Day(to)}, func(rows *sql.Rows) error {
		var ua string
		if err := rows.Scan(&ua); err != nil {
			return err
		}
		// A kubelet or a kube-controller-manager carries its release in its user agent:
		// "kubelet/v1.33.2 (linux/amd64) kubernetes/abc".
		name, v, ok := kubeversion.Agent(ua)
		if ok && (name == "kubelet" || name == "kube-controller-manager") && v.Key() > best.Key() {
			best = v
		}
		return nil
	})
	if err != nil {
		return kubeversion.Version{}, fmt.Errorf("cluster version: %w", err)
	}
	return best, nil
}
