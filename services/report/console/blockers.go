package console

import (
	"context"
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
// from the day rows of package rollup). A caller's rows that its later call of the
// replacement fixed block nothing (Migrated lists those callers).
func (r Reader) Blockers(ctx context.Context, cluster string, w Window, target kubeversion.Version) ([]Blocker, error) {
	bs, _, _, err := r.blockersAndMoves(ctx, cluster, w, target, false, 0)
	return bs, err
}

// Migrated lists the callers (user and user agent) that moved off what blocks target in
// cluster's window: they called the replacement after their last call of it, so Blockers
// leaves them out. The newest moves first, at most limit, and how many there are.
func (r Reader) Migrated(ctx context.Context, cluster string, w Window, target kubeversion.Version, limit int) ([]Move, int, error) {
	_, moves, n, err := r.blockersAndMoves(ctx, cluster, w, target, true, limit)
	return moves, n, err
}

// BlockersAndMoves is Blockers and Migrated from one read of the window's day rows, as the
// first screen asks for both: a month of one cluster's day rows and their join to the moves
// are read once instead of twice.
func (r Reader) BlockersAndMoves(ctx context.Context, cluster string, w Window, target kubeversion.Version, limit int) ([]Blocker, []Move, int, error) {
	return r.blockersAndMoves(ctx, cluster, w, target, true, limit)
}

// PrepareBlockers has what BlockersAndMoves reads of the store before cluster's day rows
// (the read plan of w, whether a caller moved) read under ctx's snapshot (Snapshot), so that
// a page has it read while the target is still being decided: the blockers read then starts
// at once. Without a snapshot it reads nothing.
func (r Reader) PrepareBlockers(ctx context.Context, cluster string, w Window) error {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return err
	}
	from, to := rollup.Span(w.From, w.To)
	return rollup.Prepare(ctx, r.DB, rollup.TablesFor(t), rollup.Filter{Cluster: cluster, From: from, To: to, Migrated: rollup.WithMigratedAt})
}

// movedPair is a blocker's caller (its hash) with a call of the blocker's successor
// (MigratedAt) in the window, and its findings and newest call of the blocker there.
type movedPair struct {
	caller           uint64
	findings         uint64
	last, migratedAt uint32
}

// blockersAndMoves reads both (the moves only withMoves, at most limit listed). Two queries:
// the counts by the day rows' blocker and caller hashes, numbers only; then the names of the
// blockers and callers listed, from the names the compaction kept (or the key columns of the
// hour states).
// Grouping a month of day rows by their strings measured four times slower on ClickHouse
// 18.16.
//
// Each (blocker, caller) pair of rows comes with the findings of its rows that still block
// (those seen at or after the caller's newest call of the successor, migrated_at), and, when
// the caller called the successor, with all its findings, its newest call and migrated_at: a
// caller (user and user agent, over its source IPs) moved off a blocker when its newest call
// of the successor is later than its newest call of the blocker, as package rollup's Moves
// says.
func (r Reader) blockersAndMoves(ctx context.Context, cluster string, w Window, target kubeversion.Version, withMoves bool, limit int) ([]Blocker, []Move, int, error) {
	t, _, err := r.check(cluster, w, Page{})
	if err != nil {
		return nil, nil, 0, err
	}
	if target.IsZero() {
		return nil, nil, 0, invalid("target version is not set")
	}
	src, args, err := r.daysOf(ctx, t, cluster, w, rollup.WithMigratedAt, []string{"blocker", "caller", "first_seen", "last_seen"}, blocking, target.Key())
	if err != nil {
		return nil, nil, 0, err
	}
	var out []Blocker
	var hashes []uint64               // of out's blockers
	var tops [][]Caller               // out's candidates, ID the caller hash
	var callers []uint64              // every candidate's and moved caller's hash
	moved := map[uint64][]movedPair{} // by blocker hash
	seen := map[string]bool{}
	var days []string // the days each candidate was last seen, where its key has a state
	addDay := func(t time.Time) {
		if d := rollup.Day(t); !seen[d] {
			seen[d] = true
			days = append(days, d)
		}
	}
	// The blockers fully moved off (total 0) come too, last, for their moves; the query has
	// no LIMIT for them: a cluster's blockers are bounded by the rule catalogue. A blocker's
	// callers are sorted for its candidates only from those at least as busy as its
	// topCandidates-th busiest (found by a sort of numbers): ordering every caller by count
	// and id took a fifth of the read (a month of 46,000 callers: 100 ms median, 82 without).
	err = each(ctx, r.DB, "blockers", `SELECT blocker, toUInt64(sum(n)) AS total, toUInt64(countIf(n > 0)), toUInt32(max(l)),
  arrayMap(c -> toUInt64(c.1), arraySlice(arraySort(c -> (-toInt64(c.1), c.2),
    arrayFilter(c -> c.1 >= arrayReverseSort(groupArrayIf(n, n > 0))[?], groupArrayIf((n, caller, f, l), n > 0))), 1, ?) AS top),
  arrayMap(c -> c.2, top), arrayMap(c -> toUInt64(c.3), top), arrayMap(c -> toUInt64(c.4), top),
  arrayMap(c -> c.1, groupArrayIf((caller, all_n, all_l, m), m > 0 AND ?) AS moved),
  arrayMap(c -> toUInt64(c.2), moved), arrayMap(c -> toUInt64(c.3), moved), arrayMap(c -> toUInt64(c.4), moved)
FROM (
  SELECT blocker, caller, sumIf(findings, last_seen >= migrated_at) AS n, minIf(first_seen, last_seen >= migrated_at) AS f,
    maxIf(last_seen, last_seen >= migrated_at) AS l, sum(findings) AS all_n, max(last_seen) AS all_l, max(migrated_at) AS m
  FROM (`+src+`)
  GROUP BY blocker, caller
)
GROUP BY blocker
ORDER BY total DESC, blocker`, append([]any{topCandidates, topCandidates, withMoves}, args...), func(rows rollup.Row) error {
		var b Blocker
		var blocker uint64
		var last uint32
		var n, ids, first, lastSeen []uint64
		var mCallers, mFindings, mLast, mAt []uint64
		if err := rows.Scan(&blocker, &b.Requests, &b.Callers, &last, &n, &ids, &first, &lastSeen,
			&mCallers, &mFindings, &mLast, &mAt); err != nil {
			return err
		}
		if len(mCallers) > 0 {
			ps := make([]movedPair, len(mCallers))
			for i := range mCallers {
				ps[i] = movedPair{caller: mCallers[i], findings: mFindings[i], last: uint32(mLast[i]), migratedAt: uint32(mAt[i])}
				addDay(unix(ps[i].last))
			}
			moved[blocker] = ps
			callers = append(callers, mCallers...)
		}
		if b.Requests == 0 || len(out) == maxBlockers {
			return nil // every caller moved off it, or past the list's cap
		}
		b.LastSeen = unix(last)
		cs := make([]Caller, len(ids))
		for i := range ids {
			cs[i] = Caller{Findings: n[i], ID: strconv.FormatUint(ids[i], 10),
				FirstSeen: unix(uint32(first[i])), LastSeen: unix(uint32(lastSeen[i]))}
			addDay(cs[i].LastSeen)
		}
		out, hashes, tops, callers = append(out, b), append(hashes, blocker), append(tops, cs), append(callers, ids...)
		return nil
	})
	if err != nil || (len(out) == 0 && len(moved) == 0) {
		return nil, nil, 0, err
	}
	named := append([]uint64{}, hashes...)
	for blocker := range moved {
		named = append(named, blocker)
	}
	names, err := r.blockerNames(ctx, t, cluster, w, target, named, callers, namesOn(days))
	if err != nil {
		return nil, nil, 0, err
	}
	if !names.Cover(named, callers) {
		// On a replicated store the counts may come from one replica and the names from
		// another, which may not yet hold a key written a moment ago: once more, over the
		// whole window.
		if names, err = r.blockerNames(ctx, t, cluster, w, target, named, callers, nil); err != nil {
			return nil, nil, 0, err
		}
	}
	for i := range out {
		b := &out[i]
		key, ok := names.Blockers[hashes[i]]
		if !ok {
			return nil, nil, 0, fmt.Errorf("blocker %d of %s: no name in the hour states", hashes[i], cluster)
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
	moves, err := movesOf(moved, names, cluster)
	if err != nil {
		return nil, nil, 0, err
	}
	return out, moves[:min(len(moves), max(limit, 0))], len(moves), nil
}

// movesOf groups the moved pairs of each blocker by the caller's user and user agent (over its
// source IPs) and the blocker's names, and keeps those whose newest call of the successor is
// later than their newest call of the blocker: the newest move first, then by user, agent,
// rule and API.
func movesOf(moved map[uint64][]movedPair, names rollup.Names, cluster string) ([]Move, error) {
	type key struct {
		blocker             uint64
		username, userAgent string
	}
	byKey := map[key]*Move{}
	var keys []key
	for blocker, ps := range moved {
		b, ok := names.Blockers[blocker]
		if !ok {
			return nil, fmt.Errorf("blocker %d of %s: no name in the hour states", blocker, cluster)
		}
		for _, p := range ps {
			who, ok := names.Callers[p.caller]
			if !ok {
				return nil, fmt.Errorf("caller %d of %s: no name in the hour states", p.caller, cluster)
			}
			k := key{blocker, who.Username, who.UserAgent}
			m := byKey[k]
			if m == nil {
				m = &Move{RuleID: b.RuleID, APIGroup: b.APIGroup, APIVersion: b.APIVersion, Resource: b.Resource, RemovedIn: b.RemovedIn,
					Username: who.Username, UserAgent: who.UserAgent}
				byKey[k] = m
				keys = append(keys, k)
			}
			m.Findings += p.findings
			if l := unix(p.last); l.After(m.LastSeen) {
				m.LastSeen = l
			}
			if at := unix(p.migratedAt); at.After(m.MigratedAt) {
				m.MigratedAt = at
			}
		}
	}
	var out []Move
	for _, k := range keys {
		if m := byKey[k]; m.MigratedAt.After(m.LastSeen) {
			out = append(out, *m)
		}
	}
	sort.Slice(out, func(a, c int) bool {
		x, y := out[a], out[c]
		switch {
		case !x.MigratedAt.Equal(y.MigratedAt):
			return x.MigratedAt.After(y.MigratedAt)
		case x.Username != y.Username:
			return x.Username < y.Username
		case x.UserAgent != y.UserAgent:
			return x.UserAgent < y.UserAgent
		}
		return lessKey(BlockerKey{Rule: x.RuleID, Group: x.APIGroup, Version: x.APIVersion, Resource: x.Resource},
			BlockerKey{Rule: y.RuleID, Group: y.APIGroup, Version: y.APIVersion, Resource: y.Resource})
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
