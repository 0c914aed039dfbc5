package console

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strconv"
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

// namesOn gives the days Blockers first reads the names on (tests miss them on purpose).
var namesOn = func(days []string) []string { return days }

// topCandidates bounds the callers of each blocker read to choose its TopCallers: the
// busiest by count (ties by caller id), among which ties are ordered by name, agent and IP.
const topCandidates = 100

// Blockers lists what blocks target in cluster's window, busiest first (ties by rule and
// API), each with its TopCallers busiest callers (ties by name, agent and IP). Counts are
// exact: a request has one caller, so a blocker's requests are its callers' requests (read
// from the day rows of package rollup).
//
// Two queries: the counts by the day rows' blocker and caller hashes, numbers only; then
// the names of the blockers and callers listed, from the key columns of the hour states
// (which need no merging). Grouping a month of day rows by their strings measured four
// times slower on ClickHouse 18.16.
func (r Reader) Blockers(ctx context.Context, cluster string, w Window, target kubeversion.Version) ([]Blocker, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return nil, err
	}
	if target.IsZero() {
		return nil, invalid("target version is not set")
	}
	// A caller's rows that its later call of the replacement fixed block nothing.
	src, args, err := r.daysOf(ctx, t, cluster, w, rollup.Unmigrated, []string{"blocker", "caller", "first_seen", "last_seen"}, blocking, target.Key())
	if err != nil {
		return nil, err
	}
	var out []Blocker
	var hashes []uint64  // of out's blockers
	var tops [][]Caller  // out's candidates, ID the caller hash
	var callers []uint64 // every candidate's hash
	seen := map[string]bool{}
	var days []string // the days each candidate was last seen, where its key has a state
	err = each(ctx, r.DB, "blockers", `SELECT blocker, toUInt64(sum(n)) AS total, toUInt64(count()), toUInt32(max(l)),
  arrayMap(c -> toUInt64(c.1), arraySlice(arraySort(c -> (-toInt64(c.1), c.2), groupArray((n, caller, f, l))), 1, ?) AS top),
  arrayMap(c -> c.2, top), arrayMap(c -> toUInt64(c.3), top), arrayMap(c -> toUInt64(c.4), top)
FROM (
  SELECT blocker, caller, sum(findings) AS n, min(first_seen) AS f, max(last_seen) AS l
  FROM (`+src+`)
  GROUP BY blocker, caller
)
GROUP BY blocker
ORDER BY total DESC, blocker
LIMIT ?`, append(append([]any{topCandidates}, args...), maxBlockers), func(rows *sql.Rows) error {
		var b Blocker
		var blocker uint64
		var last uint32
		var n, ids, first, lastSeen []uint64
		if err := rows.Scan(&blocker, &b.Requests, &b.Callers, &last, &n, &ids, &first, &lastSeen); err != nil {
			return err
		}
		b.LastSeen = unix(last)
		cs := make([]Caller, len(ids))
		for i := range ids {
			cs[i] = Caller{Findings: n[i], ID: strconv.FormatUint(ids[i], 10),
				FirstSeen: unix(uint32(first[i])), LastSeen: unix(uint32(lastSeen[i]))}
			if d := rollup.Day(cs[i].LastSeen); !seen[d] {
				seen[d] = true
				days = append(days, d)
			}
		}
		out, hashes, tops, callers = append(out, b), append(hashes, blocker), append(tops, cs), append(callers, ids...)
		return nil
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	names, err := r.blockerNames(ctx, t, cluster, w, target, hashes, callers, namesOn(days))
	if err != nil {
		return nil, err
	}
	if !names.Cover(hashes, callers) {
		// On a replicated store the counts may come from one replica and the names from
		// another, which may not yet hold a key written a moment ago: once more, over the
		// whole window.
		if names, err = r.blockerNames(ctx, t, cluster, w, target, hashes, callers, nil); err != nil {
			return nil, err
		}
	}
	for i := range out {
		b := &out[i]
		key, ok := names.Blockers[hashes[i]]
		if !ok {
			return nil, fmt.Errorf("blocker %d of %s: no name in the hour states", hashes[i], cluster)
		}
		b.Key = BlockerKey{Rule: key.RuleID, Group: key.APIGroup, Version: key.APIVersion, Resource: key.Resource}
		b.RemovedIn, b.Replacement = key.RemovedIn, key.Replacement
		cs := tops[i]
		for j := range cs {
			// A caller still without a name is listed by its id (its links work by id).
			who := names.Callers[callerHash(cs[j].ID)]
			cs[j].Username, cs[j].UserAgent, cs[j].SourceIP = who.Username, who.UserAgent, who.SourceIP
		}
		// The candidates come busiest first; those as busy as the last listed are ordered by
		// name, agent and IP.
		sort.SliceStable(cs, func(a, c int) bool {
			if cs[a].Findings != cs[c].Findings {
				return cs[a].Findings > cs[c].Findings
			}
			if cs[a].Username != cs[c].Username {
				return cs[a].Username < cs[c].Username
			}
			if cs[a].UserAgent != cs[c].UserAgent {
				return cs[a].UserAgent < cs[c].UserAgent
			}
			return cs[a].SourceIP < cs[c].SourceIP
		})
		b.Top = cs[:min(len(cs), TopCallers)]
	}
	sort.SliceStable(out, func(a, c int) bool {
		x, y := out[a], out[c]
		if x.Requests != y.Requests {
			return x.Requests > y.Requests
		}
		return lessKey(x.Key, y.Key)
	})
	return out, nil
}

func lessKey(a, b BlockerKey) bool {
	if a.Rule != b.Rule {
		return a.Rule < b.Rule
	}
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if a.Version != b.Version {
		return a.Version < b.Version
	}
	return a.Resource < b.Resource
}

// blockerNames reads the names of the blockers and callers given by their hashes (package
// rollup's NamesOf) on the days given, or over w's days when days is nil.
func (r Reader) blockerNames(ctx context.Context, t, cluster string, w Window, target kubeversion.Version, blockers, callers []uint64, days []string) (rollup.Names, error) {
	from, to := rollup.Span(w.From, w.To)
	return rollup.NamesOf(ctx, r.DB, rollup.TablesFor(t), cluster, days, from, to, target.Key(), blockers, callers)
}

// callerHash is the hash a Caller.ID of Blockers spells.
func callerHash(id string) uint64 {
	h, _ := strconv.ParseUint(id, 10, 64)
	return h
}

// ClusterVersion is the newest release a kubelet or controller-manager of cluster named in
// its user agent in the window, zero when none did.
func (r Reader) ClusterVersion(ctx context.Context, cluster string, w Window) (kubeversion.Version, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return kubeversion.Version{}, err
	}
	var best kubeversion.Version
	from, to := rollup.Span(w.From, w.To)
	agents, err := rollup.Agents(ctx, r.DB, rollup.TablesFor(t), cluster, from, to, []string{"kubelet/v", "kube-controller-manager/v"}, 1000)
	if err != nil {
		return kubeversion.Version{}, fmt.Errorf("cluster version: %w", err)
	}
	for _, ua := range agents {
		// A kubelet or a kube-controller-manager carries its release in its user agent:
		// "kubelet/v1.33.2 (linux/amd64) kubernetes/abc".
		name, v, ok := kubeversion.Agent(ua)
		if ok && (name == "kubelet" || name == "kube-controller-manager") && v.Key() > best.Key() {
			best = v
		}
	}
	return best, nil
}

// Move is a caller that moved off a blocker (package rollup's).
type Move = rollup.Move

// Migrated lists the callers (user and user agent) that moved off what blocks target in
// cluster's window: they called the replacement after their last call of it, so Blockers
// leaves them out. The newest moves first, at most limit, and how many there are.
func (r Reader) Migrated(ctx context.Context, cluster string, w Window, target kubeversion.Version, limit int) ([]Move, int, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return nil, 0, err
	}
	from, to := rollup.Span(w.From, w.To)
	return rollup.Moves(ctx, r.DB, rollup.TablesFor(t), rollup.Filter{Cluster: cluster, From: from, To: to, Where: blocking,
		Args: []any{target.Key()}}, limit)
}
