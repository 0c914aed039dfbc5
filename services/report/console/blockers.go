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
// the names of the blockers and callers listed, from the key columns of the day states
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
	if !names.cover(hashes, callers) {
		// On a replicated store the counts may come from one replica and the names from
		// another, which may not yet hold a key written a moment ago: once more, over the
		// whole window.
		if names, err = r.blockerNames(ctx, t, cluster, w, target, hashes, callers, nil); err != nil {
			return nil, err
		}
	}
	for i := range out {
		b := &out[i]
		key, ok := names.blockers[hashes[i]]
		if !ok {
			return nil, fmt.Errorf("blocker %d of %s: no name in the day states", hashes[i], cluster)
		}
		b.Key, b.RemovedIn, b.Replacement = key.Key, key.RemovedIn, key.Replacement
		cs := tops[i]
		for j := range cs {
			// A caller still without a name is listed by its id (its links work by id).
			who := names.callers[cs[j].ID]
			cs[j].Username, cs[j].UserAgent, cs[j].SourceIP = who[0], who[1], who[2]
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

// names are the blockers (by BlockerHash) and callers (by CallerHash as Caller.ID: user,
// agent, IP) that Blockers lists.
type names struct {
	blockers map[uint64]Blocker
	callers  map[string][3]string
}

// cover reports whether n names every blocker and caller given by their hashes.
func (n names) cover(blockers, callers []uint64) bool {
	for _, b := range blockers {
		if _, ok := n.blockers[b]; !ok {
			return false
		}
	}
	for _, c := range callers {
		if _, ok := n.callers[strconv.FormatUint(c, 10)]; !ok {
			return false
		}
	}
	return true
}

// blockerNames reads the names of the blockers and callers given by their hashes from the
// key columns of cluster's day states that block target, on the days given (those the
// callers were last seen, whose states hold their keys), or over w's days when days is nil.
// Reading key columns merges nothing.
func (r Reader) blockerNames(ctx context.Context, t, cluster string, w Window, target kubeversion.Version, blockers, callers []uint64, days []string) (names, error) {
	n := names{blockers: map[uint64]Blocker{}, callers: map[string][3]string{}}
	onDays, args := `day IN (SELECT toDate(arrayJoin(?)))`, []any{cluster, days}
	if days == nil {
		from, to := rollup.Span(w.From, w.To)
		onDays, args = `day >= toDate(?) AND day < toDate(?)`, []any{cluster, rollup.Day(from), rollup.Day(to)}
	}
	err := each(ctx, r.DB, "blocker names", `SELECT `+rollup.BlockerHash+` AS b, `+rollup.CallerHash+` AS c,
  any(rule_id), any(api_group), any(api_version), any(resource), any(removed_in), any(replacement),
  any(username), any(user_agent), any(source_ip)
FROM `+rollup.TablesFor(t).State+`
WHERE cluster = ? AND `+onDays+` AND `+blocking+`
  AND b IN (SELECT arrayJoin(?)) AND c IN (SELECT arrayJoin(?))
GROUP BY b, c`, append(args, target.Key(), blockers, callers), func(rows *sql.Rows) error {
		var b, c uint64
		var k Blocker
		var who [3]string
		if err := rows.Scan(&b, &c, &k.Key.Rule, &k.Key.Group, &k.Key.Version, &k.Key.Resource, &k.RemovedIn, &k.Replacement,
			&who[0], &who[1], &who[2]); err != nil {
			return err
		}
		n.blockers[b] = k
		n.callers[strconv.FormatUint(c, 10)] = who
		return nil
	})
	return n, err
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
