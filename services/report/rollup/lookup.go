package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// What the console and the weekly report ask of the day rows beside their counts (Days):
// the clusters, their newest findings, the names behind the blocker and caller hashes, the
// removal releases and agents seen. Each reads the hours' change times, the name tables, or
// the columns it needs of the day rows through Days (with AnyBuild: maxima and distinct
// values): the rows of the builds (one per key and day, however many findings it counts) and
// the states of the hours not built, never every hour's states. Each is bounded by its
// context's deadline (Bounded).

// Blocking is the condition on a day row (or a finding) that it blocks the upgrade to the
// target bound as its one parameter (kubeversion.Version.Key): what it uses is removed in a
// release at or before the target. removed_in_key is the store's numeric form of removed_in
// (MAJOR*1000+MINOR, 0 when empty or malformed), so versions compare as numbers (1.9 < 1.16)
// and an unknown removal never blocks.
const Blocking = `(removed_in_key >= 1000 AND removed_in_key <= ?)`

// Bounded is q with ClickHouse's max_execution_time set to what is left of ctx's deadline
// (whole seconds, at least one), so that the engine itself stops a query the request no
// longer waits for: a server also hears of it through the client's cancel, but embedded chDB
// cannot interrupt a running query otherwise. Without a deadline q is unchanged.
func Bounded(ctx context.Context, q string) string {
	d, ok := ctx.Deadline()
	if !ok {
		return q
	}
	secs := max(1, int((time.Until(d)+time.Second-1)/time.Second))
	return q + "\nSETTINGS max_execution_time = " + strconv.Itoa(secs)
}

// Clusters lists the clusters that have day rows, at most limit, by name.
func Clusters(ctx context.Context, db *sql.DB, t Tables, limit int) ([]string, error) {
	var out []string
	err := Query(ctx, db, "cluster names", `SELECT DISTINCT toString(cluster) AS c FROM `+t.HourChanges+` ORDER BY c LIMIT ?`, []any{limit},
		func(r Row) error {
			var n string
			if err := r.Scan(&n); err != nil {
				return err
			}
			out = append(out, n)
			return nil
		})
	return out, err
}

// Weeks says whether a cluster has findings in the week starting at a Monday and in the week
// before it.
type Weeks struct{ This, Last bool }

// WeeksOf reads, for every cluster with findings since the week before weekStart, whether
// it has findings in the week starting at weekStart (or later: a cluster's clock may run
// ahead) and in the week before: from the days that received findings, so no counting.
func WeeksOf(ctx context.Context, db *sql.DB, t Tables, weekStart time.Time) (map[string]Weeks, error) {
	out := map[string]Weeks{}
	ws := weekStart.UTC().Truncate(24 * time.Hour)
	err := Query(ctx, db, "clusters' weeks", `SELECT toString(cluster) AS c, toUInt8(max(hour >= toDateTime(?))), toUInt8(min(hour) < toDateTime(?))
FROM `+t.HourChanges+`
WHERE hour >= toDateTime(?)
GROUP BY c`, []any{ws.Unix(), ws.Unix(), ws.AddDate(0, 0, -7).Unix()}, func(r Row) error {
		var name string
		var this, last uint8
		if err := r.Scan(&name, &this, &last); err != nil {
			return err
		}
		out[name] = Weeks{This: this == 1, Last: last == 1}
		return nil
	})
	return out, err
}

// Newest is a cluster's newest finding and newest finding that blocks a target, in Unix
// seconds (0: none).
type Newest struct {
	Cluster          string
	Finding, Blocker uint32
}

// NewestOf reads the newest finding and the newest that blocks target (Blocking's parameter)
// of each cluster, at most limit clusters, by name: from the day rows (Days) of every day
// kept, whose builds hold a row per key and day however many findings it counts, and whose
// states are those of the hours not built. The recent days come first (recentDays): a
// cluster with a finding that blocks among them is answered there, and only the other
// clusters' older days are read.
func NewestOf(ctx context.Context, db *sql.DB, t Tables, target, limit int) ([]Newest, error) {
	since, err := recentFrom(ctx, db)
	if err != nil {
		return nil, err
	}
	found := map[string]Newest{}
	if err := newestOf(ctx, db, t, Filter{From: since, To: farDay}, target, found); err != nil {
		return nil, err
	}
	// The clusters are those whose hours changed (finding_hour_changes, kept as long as the
	// day rows): those without a blocker among the recent days are read over every day.
	var rest []string
	err = Query(ctx, db, "clusters", `SELECT DISTINCT toString(cluster) FROM `+t.HourChanges, nil, func(r Row) error {
		var c string
		if err := r.Scan(&c); err != nil {
			return err
		}
		if found[c].Blocker == 0 {
			rest = append(rest, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		older := Filter{From: epoch, To: farDay, Where: `cluster IN (` + strings.Repeat("?, ", len(rest)-1) + `?)`}
		for _, c := range rest {
			older.Args = append(older.Args, c)
		}
		if err := newestOf(ctx, db, t, older, target, found); err != nil {
			return nil, err
		}
	}
	out := make([]Newest, 0, len(found))
	for _, n := range found {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Newest) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out[:min(len(out), limit)], nil
}

// newestOf reads the newest finding and newest blocker of each cluster in the rows f asks
// for (every build's: maxima), keeping in found the later of each.
func newestOf(ctx context.Context, db *sql.DB, t Tables, f Filter, target int, found map[string]Newest) error {
	f.Columns, f.AnyBuild = []string{"removed_in_key", "last_seen"}, true
	src, args, err := Days(ctx, db, t, f)
	if err != nil {
		return err
	}
	return Query(ctx, db, "clusters", `SELECT toString(cluster) AS c, toUInt32(max(last_seen)), toUInt32(maxIf(last_seen, `+Blocking+`))
FROM (`+src+`)
GROUP BY c`, append([]any{target}, args...), func(r Row) error {
		var n Newest
		if err := r.Scan(&n.Cluster, &n.Finding, &n.Blocker); err != nil {
			return err
		}
		had := found[n.Cluster]
		n.Finding, n.Blocker = max(n.Finding, had.Finding), max(n.Blocker, had.Blocker)
		found[n.Cluster] = n
		return nil
	})
}

// recentDays is how many days back from the server's today the newest findings are looked
// for first: a live cluster's newest finding that blocks lies among them, and reading them
// alone costs a fraction of every day kept (90 days, 10 M findings: 1.1 M day rows, about
// 60 ms on ClickHouse 18.16). What they lack is read from every day after.
const recentDays = 7

// recentFrom is the first of the recent days (recentDays) by the server's clock.
func recentFrom(ctx context.Context, db *sql.DB) (time.Time, error) {
	return remember(ctx, "recent", func() (time.Time, error) {
		var now uint32
		if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
			return time.Time{}, fmt.Errorf("read the server's clock: %w", err)
		}
		return time.Unix(int64(now), 0).UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-recentDays), nil
	})
}

// epoch is before, and farDay after, every day a finding can lie in (ClickHouse 18.16's Date
// spans 1970 to 2105): a lookup over every day kept reads the days [epoch, farDay).
var (
	epoch  = time.Unix(0, 0).UTC()
	farDay = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// NewestBlocker is the Unix second of cluster's newest finding that blocks target
// (Blocking's parameter), 0 when none does: among the recent days first (recentDays), then
// among every day when none of them has one.
func NewestBlocker(ctx context.Context, db *sql.DB, t Tables, cluster string, target int) (uint32, error) {
	since, err := recentFrom(ctx, db)
	if err != nil {
		return 0, err
	}
	for _, from := range []time.Time{since, epoch} {
		src, args, err := Days(ctx, db, t, Filter{Cluster: cluster, From: from, To: farDay,
			Columns: []string{"removed_in_key", "last_seen"}, Where: Blocking, Args: []any{target}, AnyBuild: true})
		if err != nil {
			return 0, err
		}
		var last uint32
		err = Query(ctx, db, "newest blocker", `SELECT toUInt32(max(last_seen)) FROM (`+src+`)`, args,
			func(r Row) error { return r.Scan(&last) })
		if err != nil || last > 0 {
			return last, err
		}
	}
	return 0, nil
}

// RemovedIn lists the removal releases (removed_in_key, MAJOR*1000+MINOR) the findings of
// cluster name, at most limit, oldest first.
func RemovedIn(ctx context.Context, db *sql.DB, t Tables, cluster string, limit int) ([]uint32, error) {
	src, args, err := Days(ctx, db, t, Filter{Cluster: cluster, From: epoch, To: farDay,
		Columns: []string{"removed_in_key"}, Where: `removed_in_key >= 1000`, AnyBuild: true})
	if err != nil {
		return nil, err
	}
	var out []uint32
	err = Query(ctx, db, "releases", `SELECT DISTINCT removed_in_key FROM (`+src+`)
ORDER BY removed_in_key
LIMIT ?`, append(args, limit), func(r Row) error {
		var k uint32
		if err := r.Scan(&k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	return out, err
}

// Agents lists the distinct user agents (their first 64 characters) that start with one of
// prefixes in cluster's days [from, to) (midnights), at most limit.
func Agents(ctx context.Context, db *sql.DB, t Tables, cluster string, from, to time.Time, prefixes []string, limit int) ([]string, error) {
	if len(prefixes) == 0 {
		return nil, nil
	}
	starts := make([]string, len(prefixes))
	var startArgs []any
	for i, p := range prefixes {
		starts[i] = "startsWith(user_agent, ?)"
		startArgs = append(startArgs, p)
	}
	src, args, err := Days(ctx, db, t, Filter{Cluster: cluster, From: from, To: to,
		Columns: []string{"user_agent"}, Where: strings.Join(starts, " OR "), Args: startArgs, AnyBuild: true})
	if err != nil {
		return nil, err
	}
	var out []string
	err = Query(ctx, db, "user agents", `SELECT DISTINCT substring(user_agent, 1, 64) FROM (`+src+`)
LIMIT ?`, append(args, limit), func(r Row) error {
		var ua string
		if err := r.Scan(&ua); err != nil {
			return err
		}
		out = append(out, ua)
		return nil
	})
	return out, err
}

// BlockerName is what a blocker hash (BlockerHash) stands for.
type BlockerName struct {
	RuleID, APIGroup, APIVersion, Resource, RemovedIn, Replacement string
}

// CallerName is what a caller hash (CallerHash) stands for.
type CallerName struct {
	Username, UserAgent, SourceIP string
}

// Names are the blockers and callers some hashes stand for.
type Names struct {
	Blockers map[uint64]BlockerName
	Callers  map[uint64]CallerName
}

// Cover reports whether n names every blocker and caller given by their hashes.
func (n Names) Cover(blockers, callers []uint64) bool {
	for _, b := range blockers {
		if _, ok := n.Blockers[b]; !ok {
			return false
		}
	}
	for _, c := range callers {
		if _, ok := n.Callers[c]; !ok {
			return false
		}
	}
	return true
}

// NamesOf reads what the hashes of blockers and callers of cluster stand for: from the names
// the compaction kept (blocker_names, caller_names), and those it has not kept yet (of hours
// not built, or built on a replica that lags) from the key columns of the hour states that
// block target (Blocking's parameter) on the days given ("YYYY-MM-DD", those the callers were
// last seen, whose states hold their keys), or, when days is nil, over the days [from, to).
func NamesOf(ctx context.Context, db *sql.DB, t Tables, cluster string, days []string, from, to time.Time, target int, blockers, callers []uint64) (Names, error) {
	n := Names{Blockers: map[uint64]BlockerName{}, Callers: map[uint64]CallerName{}}
	err := n.read(ctx, db, "", t.BlockerNames, t.CallerNames, "seen", "1", nil, blockers, callers)
	if err != nil || n.Cover(blockers, callers) {
		return n, err
	}
	return n, n.fromStates(ctx, db, t, cluster, days, from, to, target, blockers, callers)
}

// WithNames is the SQL of the rows of src (a query whose rows have the columns blocker and
// caller) with the names the compaction kept for their hashes: c_user, c_agent, c_ip and
// c_named (1 when the caller has a name) and b_rule, b_group, b_version, b_resource,
// b_removed (the newest) and b_named; a hash without a name yet (an hour not built, or
// built on a replica that lags) has empty names and 0. Its one parameter, after src's, is the
// first day ("YYYY-MM-DD") of src's rows: a name kept holds the newest day it was seen, so
// the names last seen before it are not read. The names are read whole, not looked up by
// hash: for a reader that orders many rows by name (console.Search), in the same query.
func WithNames(t Tables, src string) string {
	return `SELECT * FROM (
  SELECT * FROM (` + src + `) AS rows
  ANY LEFT JOIN (
    SELECT caller, username AS c_user, user_agent AS c_agent, source_ip AS c_ip, toUInt8(1) AS c_named
    FROM ` + t.CallerNames + `
    WHERE seen >= toDate(?)
  ) AS callers USING caller
) AS named_rows
ANY LEFT JOIN (
  SELECT blocker, any(rule_id) AS b_rule, any(api_group) AS b_group, any(api_version) AS b_version, any(resource) AS b_resource,
    argMax(removed_in, seen) AS b_removed, toUInt8(1) AS b_named
  FROM ` + t.BlockerNames + `
  GROUP BY blocker
) AS blockers USING blocker`
}

// read adds to n the names of blockers and callers (their hashes; none read when empty)
// from the rows of blockerTable and callerTable that satisfy where (with args), the newest by
// the column newest where a hash has several; what names the source in errors. The two are
// read side by side.
func (n Names) read(ctx context.Context, db *sql.DB, what, blockerTable, callerTable, newest, where string, args []any, blockers, callers []uint64) error {
	last := func(cols ...string) string {
		for i, c := range cols {
			cols[i] = "argMax(" + c + ", " + newest + ")"
		}
		return strings.Join(cols, ", ")
	}
	var g errgroup.Group
	g.Go(func() error {
		if len(blockers) == 0 {
			return nil
		}
		return Query(ctx, db, "blocker names"+what, `SELECT blocker, `+last("rule_id", "api_group", "api_version", "resource", "removed_in", "replacement")+`
FROM `+blockerTable+`
WHERE `+where+` AND blocker IN (SELECT arrayJoin(?))
GROUP BY blocker`, append(slices.Clip(args), blockers), func(r Row) error {
			var b uint64
			var k BlockerName
			if err := r.Scan(&b, &k.RuleID, &k.APIGroup, &k.APIVersion, &k.Resource, &k.RemovedIn, &k.Replacement); err != nil {
				return err
			}
			n.Blockers[b] = k
			return nil
		})
	})
	g.Go(func() error {
		if len(callers) == 0 {
			return nil
		}
		return Query(ctx, db, "caller names"+what, `SELECT caller, `+last("username", "user_agent", "source_ip")+`
FROM `+callerTable+`
WHERE `+where+` AND caller IN (SELECT arrayJoin(?))
GROUP BY caller`, append(slices.Clip(args), callers), func(r Row) error {
			var c uint64
			var who CallerName
			if err := r.Scan(&c, &who.Username, &who.UserAgent, &who.SourceIP); err != nil {
				return err
			}
			n.Callers[c] = who
			return nil
		})
	})
	return g.Wait()
}

// fromStates adds to n the names of the blockers and callers it lacks, from the hour states
// (see NamesOf).
func (n Names) fromStates(ctx context.Context, db *sql.DB, t Tables, cluster string, days []string, from, to time.Time, target int, blockers, callers []uint64) error {
	var lackB, lackC []uint64
	for _, b := range blockers {
		if _, ok := n.Blockers[b]; !ok {
			lackB = append(lackB, b)
		}
	}
	for _, c := range callers {
		if _, ok := n.Callers[c]; !ok {
			lackC = append(lackC, c)
		}
	}
	if days != nil {
		// The hours of the days given, between the first and the last of them.
		from, to = farDay, time.Time{}
		for _, d := range days {
			start, err := time.Parse(DayFormat, d)
			if err != nil {
				return fmt.Errorf("rollup: day %q: %w", d, err)
			}
			if start.Before(from) {
				from = start
			}
			if end := start.AddDate(0, 0, 1); end.After(to) {
				to = end
			}
		}
	}
	where, args := `cluster = ? AND hour >= toDateTime(?) AND hour < toDateTime(?) AND `+Blocking, []any{cluster, from.Unix(), to.Unix(), target}
	if days != nil {
		where += ` AND toDate(hour) IN (SELECT toDate(arrayJoin(?)))`
		args = append(args, days)
	}
	return n.read(ctx, db, " from the hour states", t.HourState, t.HourState, "hour", where, args, lackB, lackC)
}
