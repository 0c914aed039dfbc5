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
	src, args, err := r.days(ctx, t, cluster, w, []string{"rule_id", "api_group", "api_version", "resource", "removed_in",
		"replacement", "username", "user_agent", "source_ip", "first_seen", "last_seen"}, blocking, target.Key())
	if err != nil {
		return nil, err
	}
	// One pass: the callers of each blocker summed over the days, then per blocker their
	// sums, count and the TopCallers busiest (ties by name, agent, IP). See hashOf.
	var out []Blocker
	err = each(ctx, r.DB, "blockers", `SELECT b_rule, b_group, b_version, b_resource, b_removed, b_repl, b_total, b_callers, b_last,
  arrayMap(c -> toUInt64(c.1), top), arrayMap(c -> c.2, top), arrayMap(c -> c.3, top), arrayMap(c -> c.4, top),
  arrayMap(c -> toUInt64(c.5), top), arrayMap(c -> toUInt64(c.6), top), arrayMap(c -> c.7, top)
FROM (
  SELECT c_rule AS b_rule, c_group AS b_group, c_version AS b_version, c_resource AS b_resource,
    any(c_removed) AS b_removed, any(c_repl) AS b_repl,
    toUInt64(sum(c_n)) AS b_total, toUInt64(count()) AS b_callers, toUInt32(max(c_last)) AS b_last,
    arraySlice(arraySort(c -> (-toInt64(c.1), c.2, c.3, c.4),
      groupArray((c_n, c_user, c_agent, c_ip, c_first, c_last, `+callerIDOf("c_user", "c_agent", "c_ip")+`))), 1, ?) AS top
  FROM (
    SELECT any(rule_id) AS c_rule, any(api_group) AS c_group, any(api_version) AS c_version, any(resource) AS c_resource,
      any(username) AS c_user, any(user_agent) AS c_agent, any(source_ip) AS c_ip,
      any(removed_in) AS c_removed, any(replacement) AS c_repl,
      sum(findings) AS c_n, min(first_seen) AS c_first, max(last_seen) AS c_last
    FROM (`+src+`)
    GROUP BY `+hashOf("rule_id, api_group, api_version, resource, username, user_agent, source_ip")+`
  )
  GROUP BY c_rule, c_group, c_version, c_resource
)
ORDER BY b_total DESC, b_rule, b_group, b_version, b_resource
LIMIT ?`, append(append([]any{TopCallers}, args...), maxBlockers), func(rows *sql.Rows) error {
		var b Blocker
		var last uint32
		var n, first, lastSeen []uint64
		var users, agents, ips, ids []string
		if err := rows.Scan(&b.Key.Rule, &b.Key.Group, &b.Key.Version, &b.Key.Resource, &b.RemovedIn, &b.Replacement,
			&b.Requests, &b.Callers, &last, &n, &users, &agents, &ips, &first, &lastSeen, &ids); err != nil {
			return err
		}
		b.LastSeen = unix(last)
		for i := range n {
			b.Top = append(b.Top, Caller{Username: users[i], UserAgent: agents[i], SourceIP: ips[i], Findings: n[i],
				FirstSeen: unix(uint32(first[i])), LastSeen: unix(uint32(lastSeen[i])), ID: ids[i]})
		}
		out = append(out, b)
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
