package weekly

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/rollup"
)

// Options select what Build reports.
type Options struct {
	// Cluster whose findings are reported.
	Cluster string
	// Target is the Kubernetes version the cluster is to be upgraded to.
	Target Version
	// Current is the release the cluster runs, CurrentWhy where it was read; zero: Build reads
	// it (console.Reader.ClusterRelease at the week's end). Blockers removed at or before it
	// are failing already, listed after what the upgrade breaks (MarkFailingNow).
	Current    Version
	CurrentWhy string
	// WeekEnding is the last day of the week reported; the week is the seven UTC days
	// ending with it.
	WeekEnding Date
	// Table holding the findings; default "findings" (in the connection's database).
	Table string
	// TrendWeeks is how many weeks the weekly trend covers, this one included; default 8.
	TrendWeeks int
	// CallersPerBlocker caps the callers listed under each blocker (the busiest first);
	// default 25. Blocker.Callers counts them all.
	CallersPerBlocker int
	// MaxChanges caps the New and Resolved lists (the busiest first); default 100.
	// Report.NewCount and ResolvedCount count them all.
	MaxChanges int
	// Now stamps GeneratedAt; default time.Now.
	Now func() time.Time
}

const (
	// DefaultTable is where the store keeps the raw findings.
	DefaultTable      = "findings"
	defaultTrendWeeks = 8
	defaultPerBlocker = 25
	defaultMaxChanges = 100
)

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Validate checks o and fills its defaults.
func (o *Options) Validate() error {
	if err := o.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// ErrInvalid marks an error of Build or Validate caused by the options (a bad request), not
// by the database.
var ErrInvalid = errors.New("invalid report options")

func (o *Options) validate() error {
	if o.Cluster == "" {
		return errors.New("cluster is empty")
	}
	if o.Target.IsZero() {
		return errors.New("target version is not set")
	}
	if o.WeekEnding.IsZero() {
		return errors.New("week ending is not set")
	}
	if err := CheckWeekEnding(o.WeekEnding); err != nil {
		return fmt.Errorf("week ending %s: %w", o.WeekEnding, err)
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if !identRe.MatchString(o.Table) {
		return fmt.Errorf("table %q: want [database.]name", o.Table)
	}
	if o.TrendWeeks == 0 {
		o.TrendWeeks = defaultTrendWeeks
	}
	if o.TrendWeeks < 2 || o.TrendWeeks > 104 {
		return fmt.Errorf("trend weeks %d: want 2 to 104", o.TrendWeeks)
	}
	if o.CallersPerBlocker == 0 {
		o.CallersPerBlocker = defaultPerBlocker
	}
	if o.MaxChanges == 0 {
		o.MaxChanges = defaultMaxChanges
	}
	if o.CallersPerBlocker < 1 || o.MaxChanges < 1 {
		return fmt.Errorf("callers per blocker %d, max changes %d: want at least 1", o.CallersPerBlocker, o.MaxChanges)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// blockingExpr is true for a finding that blocks the upgrade to the target bound as its one
// parameter (package rollup's).
const blockingExpr = rollup.Blocking

// Build reads the week o.WeekEnding of o.Cluster from db and assembles the report. It runs
// the same SQL on ClickHouse 18.16 and on current ClickHouse (chDB), with ? parameters only.
func Build(ctx context.Context, db *sql.DB, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	// Its parts, read side by side, read the rollup's plans and retention once.
	ctx = rollup.Snapshot(ctx)
	end := o.WeekEnding.AddDate(0, 0, 1)
	start := end.AddDate(0, 0, -7)
	r := &Report{
		Cluster:     o.Cluster,
		Target:      o.Target,
		Current:     o.Current,
		CurrentWhy:  o.CurrentWhy,
		WeekStart:   start,
		WeekEnd:     end,
		WeekEnding:  o.WeekEnding,
		GeneratedAt: o.Now().UTC().Truncate(time.Second),
	}
	// The parts read apart from one another, side by side; each writes its own fields of r.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return trend(ctx, db, o, r) })
	g.Go(func() error { return blockers(ctx, db, o, r) })
	g.Go(func() (err error) {
		r.Migrated, r.MigratedCount, err = migrations(ctx, db, o.Table, o.Cluster, o.Target, r.WeekStart, r.WeekEnd, o.MaxChanges)
		return err
	})
	if r.Current.IsZero() {
		g.Go(func() (err error) {
			r.Current, r.CurrentWhy, err = (console.Reader{DB: db, Table: o.Table}).ClusterRelease(ctx, o.Cluster, end)
			return err
		})
	}
	g.Go(func() error {
		cov, err := (console.Reader{DB: db, Table: o.Table}).Coverage(ctx, o.Cluster, console.Window{From: r.WeekStart, To: r.WeekEnd})
		if err == nil && (cov.Known || cov.Expired.Events > 0) {
			r.Coverage, r.NotChecked = cov.String(), cov.UncheckedFor(o.Target)
		}
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	MarkFailingNow(r.Blockers, r.Current)
	return r, nil
}

// Window is a span of time whose blockers Blockers reads, the same way Build reads a
// week's: the whole UTC days that cover [Start, End) (rollup.Span), compared with the seven
// days before them (Blocker.New).
type Window struct {
	Cluster    string
	Target     Version
	Start, End time.Time
	// Table holding the findings; default "findings".
	Table string
	// CallersPerBlocker caps the callers listed under each blocker (the busiest first);
	// default 25. Blocker.CallerCount counts them all.
	CallersPerBlocker int
}

// Blockers returns what blocks the upgrade of w.Cluster to w.Target in the window, most
// findings first, with the queries Build uses for a week's Blockers: the upgrade readiness
// gate and the weekly report agree on the same data by construction.
func Blockers(ctx context.Context, db *sql.DB, w Window) ([]Blocker, error) {
	if !w.Start.Before(w.End) {
		return nil, fmt.Errorf("%w: window %s to %s is empty", ErrInvalid, w.Start, w.End)
	}
	o := Options{Cluster: w.Cluster, Target: w.Target, Table: w.Table, CallersPerBlocker: w.CallersPerBlocker,
		WeekEnding: DateOf(w.End), MaxChanges: 1}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	from, to := rollup.Span(w.Start, w.End)
	r := &Report{Cluster: w.Cluster, Target: w.Target, WeekStart: from, WeekEnd: to}
	if err := blockers(ctx, db, o, r); err != nil {
		return nil, err
	}
	return r.Blockers, nil
}

// Migrations lists the callers that moved off what blocks w.Target in w's days (the newest
// moves first, at most limit), and how many there are: their findings do not block.
func Migrations(ctx context.Context, db *sql.DB, w Window, limit int) ([]Migration, int, error) {
	if !w.Start.Before(w.End) {
		return nil, 0, fmt.Errorf("%w: window %s to %s is empty", ErrInvalid, w.Start, w.End)
	}
	table := w.Table
	if table == "" {
		table = DefaultTable
	}
	if !identRe.MatchString(table) {
		return nil, 0, fmt.Errorf("%w: table %q: want [database.]name", ErrInvalid, table)
	}
	from, to := rollup.Span(w.Start, w.End)
	return migrations(ctx, db, table, w.Cluster, w.Target, from, to, limit)
}

// migrations reads the moves off cluster's blockers of target in the days [from, to).
func migrations(ctx context.Context, db *sql.DB, table, cluster string, target Version, from, to time.Time, limit int) ([]Migration, int, error) {
	moves, n, err := rollup.Moves(ctx, db, rollup.TablesFor(table), rollup.Filter{Cluster: cluster, From: from, To: to,
		Where: blockingExpr, Args: []any{target.Key()}}, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("query migrated callers: %w", err)
	}
	out := make([]Migration, len(moves))
	for i, m := range moves {
		out[i] = Migration{Key: Key{RuleID: m.RuleID, APIGroup: m.APIGroup, APIVersion: m.APIVersion, Resource: m.Resource, RemovedIn: m.RemovedIn},
			Username: m.Username, UserAgent: m.UserAgent, Findings: m.Findings, LastSeen: m.LastSeen, MigratedAt: m.MigratedAt}
	}
	return out, n, nil
}

// trend fills Totals (but BlockerCallers), Daily and Weekly from one query over the day rows
// of the trend weeks (package rollup), summed by rule, blocking and day.
func trend(ctx context.Context, db *sql.DB, o Options, r *Report) error {
	from := r.WeekEnd.AddDate(0, 0, -7*o.TrendWeeks)
	src, srcArgs, err := rollup.Days(ctx, db, rollup.TablesFor(o.Table), rollup.Filter{Cluster: o.Cluster, From: from, To: r.WeekEnd,
		Columns: []string{"removed_in_key"}})
	if err != nil {
		return fmt.Errorf("query trend: %w", err)
	}
	q := `SELECT rule_id, toUInt8(` + blockingExpr + `) AS blocking, toString(day) AS d, toUInt64(sum(findings)) AS n
FROM (` + src + `)
GROUP BY rule_id, blocking, d`
	days := 7 * o.TrendWeeks
	daily := make([]Point, days)
	for i := range daily {
		daily[i].Start = from.AddDate(0, 0, i)
	}
	byRule := map[string]*RuleCount{}
	err = rollup.Query(ctx, db, "trend", q, append([]any{o.Target.Key()}, srcArgs...), func(rows rollup.Row) error {
		var rule, day string
		var blocking uint8
		var n uint64
		if err := rows.Scan(&rule, &blocking, &day, &n); err != nil {
			return err
		}
		at, err := time.Parse(rollup.DayFormat, day)
		if err != nil {
			return fmt.Errorf("day %q: %w", day, err)
		}
		d := int(at.Sub(from) / (24 * time.Hour))
		if d < 0 || d >= days {
			return fmt.Errorf("day %s outside the %d days asked", day, days)
		}
		daily[d].Findings += n
		thisWeek := d >= days-7
		prevWeek := d >= days-14 && !thisWeek
		rc := byRule[rule]
		if rc == nil && (thisWeek || prevWeek) {
			rc = &RuleCount{RuleID: rule}
			byRule[rule] = rc
		}
		if blocking == 1 {
			daily[d].Blocking += n
		}
		switch {
		case thisWeek:
			rc.Findings += n
			r.Totals.Findings += n
			if blocking == 1 {
				rc.Blocking += n
				r.Totals.Blocking += n
			}
		case prevWeek:
			rc.Previous += n
			r.Totals.PreviousFindings += n
			if blocking == 1 {
				r.Totals.PreviousBlocking += n
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.Daily = daily[days-7:]
	for w := 0; w < o.TrendWeeks; w++ {
		p := Point{Start: daily[w*7].Start}
		for _, dp := range daily[w*7 : w*7+7] {
			p.Findings += dp.Findings
			p.Blocking += dp.Blocking
		}
		r.Weekly = append(r.Weekly, p)
	}
	r.Totals.ByRule = make([]RuleCount, 0, len(byRule))
	for _, rc := range byRule {
		r.Totals.ByRule = append(r.Totals.ByRule, *rc)
	}
	sort.Slice(r.Totals.ByRule, func(i, j int) bool {
		a, b := r.Totals.ByRule[i], r.Totals.ByRule[j]
		if a.Findings != b.Findings {
			return a.Findings > b.Findings
		}
		return a.RuleID < b.RuleID
	})
	return nil
}

// callerAgg is the per-caller aggregation of the blocking findings of this week and the
// week before, grouped by what blocks and who called, over src: the day rows of the blocking
// findings (package rollup); the queries below read it with their own HAVING, ORDER BY and
// LIMIT. Its parameters are aggArgs'.
func callerAgg(src string) string {
	return `SELECT rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace,
    any(replacement) AS repl, any(message) AS msg,
    toUInt64(sumIf(findings, day >= toDate(?))) AS this_n,
    toUInt64(sumIf(findings, day < toDate(?))) AS prev_n,
    toUInt32(minIf(first_seen, day >= toDate(?))) AS first_seen,
    toUInt32(maxIf(last_seen, day >= toDate(?))) AS last_seen
  FROM (` + src + `)
  GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace`
}

// aggArgs returns callerAgg's source over this week and the week before, and its arguments.
func (r *Report) aggArgs(ctx context.Context, db *sql.DB, o Options) (string, []any, error) {
	// The rows a later call of the replacement fixed are left out (Migrations lists them).
	src, srcArgs, err := rollup.Days(ctx, db, rollup.TablesFor(o.Table), rollup.Filter{Cluster: o.Cluster,
		From: r.WeekStart.AddDate(0, 0, -7), To: r.WeekEnd, Where: blockingExpr, Args: []any{o.Target.Key()}, Migrated: rollup.Unmigrated,
		Columns: []string{"api_group", "api_version", "resource", "removed_in", "replacement", "username", "user_agent", "namespace",
			"message", "first_seen", "last_seen"}})
	if err != nil {
		return "", nil, err
	}
	s := rollup.Day(r.WeekStart)
	return src, append([]any{s, s, s, s}, srcArgs...), nil
}

const keyCols = `rule_id, api_group, api_version, resource, removed_in`

// blockers fills Blockers, New, Resolved and the caller counts with one query over the
// per-caller aggregation: grouped by blocker, its exact counts of findings and callers, and
// its busiest callers of each kind (0 continuing, 1 new, 2 resolved), enough for every list:
// a blocker's busiest callers this week are among its busiest continuing and new ones, and
// the busiest new (resolved) callers overall are among the busiest new (resolved) ones of
// each blocker. Each kind's callers are ordered only from those as busy as its per-th
// busiest (found by a sort of numbers), so the rows sent stay few however many callers there
// are. The counts and the lists were two queries, each aggregating the two weeks' day rows
// by caller: for two weeks of the busier cluster at 10 M findings on ClickHouse 18.16, 55 and
// 64 ms median (74 side by side on two cores), one query 66 ms, half the work. (Counting
// callers with uniqExact grouped by blocker alone measured about twice as slow.)
func blockers(ctx context.Context, db *sql.DB, o Options, r *Report) error {
	src, args, err := r.aggArgs(ctx, db, o)
	if err != nil {
		return fmt.Errorf("query blockers: %w", err)
	}
	per := max(o.CallersPerBlocker, o.MaxChanges)
	kind := func(k int) string {
		return fmt.Sprintf(`arraySlice(arraySort(c -> (-toInt64(c.1), c.2, c.3, c.4),
    arrayFilter(c -> c.1 >= arrayReverseSort(groupArrayIf(greatest(this_n, prev_n), kind = %[1]d))[?],
      groupArrayIf((greatest(this_n, prev_n), username, user_agent, namespace, this_n, prev_n, first_seen, last_seen, kind), kind = %[1]d))), 1, ?)`, k)
	}
	q := `SELECT ` + keyCols + `, any(repl), any(msg),
  toUInt64(sum(this_n)), toUInt64(sum(prev_n)),
  toUInt64(countIf(this_n > 0)), toUInt64(countIf(this_n > 0 AND prev_n = 0)), toUInt64(countIf(this_n = 0 AND prev_n > 0)),
  toUInt32(max(last_seen)),
  arrayMap(c -> c.2, arrayConcat(` + kind(0) + `, ` + kind(1) + `, ` + kind(2) + `) AS listed), arrayMap(c -> c.3, listed), arrayMap(c -> c.4, listed),
  arrayMap(c -> toUInt64(c.5), listed), arrayMap(c -> toUInt64(c.6), listed),
  arrayMap(c -> toUInt64(c.7), listed), arrayMap(c -> toUInt64(c.8), listed), arrayMap(c -> toUInt64(c.9), listed)
FROM (
  SELECT *, toUInt8(multiIf(this_n > 0 AND prev_n > 0, 0, this_n > 0, 1, 2)) AS kind
  FROM (` + callerAgg(src) + `)
)
GROUP BY ` + keyCols + `
ORDER BY ` + keyCols
	lists := []any{per, per, per, per, per, per}
	// The callers in the order the lists are chosen from: by blocker, then kind, then
	// busiest first (ties by user, agent and namespace); New and Resolved take the busiest of
	// every blocker's, Blockers each blocker's own.
	var listed, fresh, gone []listedCaller
	r.Blockers, r.New, r.Resolved = []Blocker{}, []Change{}, []Change{}
	err = rollup.Query(ctx, db, "blockers", q, append(lists, args...), func(rows rollup.Row) error {
		var b Blocker
		var prev, callers, newCallers, resolved uint64
		var last uint32
		var users, agents, namespaces []string
		var this, before []uint64
		var first, lastSeen, kinds []uint64 // arrays of UInt64: the chDB driver scans no narrower numbers in arrays
		if err := rows.Scan(&b.RuleID, &b.APIGroup, &b.APIVersion, &b.Resource, &b.RemovedIn, &b.Replacement, &b.Message,
			&b.Findings, &prev, &callers, &newCallers, &resolved, &last,
			&users, &agents, &namespaces, &this, &before, &first, &lastSeen, &kinds); err != nil {
			return err
		}
		for i := range users {
			c := listedCaller{key: b.Key, caller: Caller{Username: users[i], UserAgent: agents[i], Namespace: namespaces[i]},
				this: this[i], prev: before[i], kind: uint8(kinds[i])}
			if c.this > 0 {
				c.caller.FirstSeen = time.Unix(int64(first[i]), 0).UTC()
				c.caller.LastSeen = time.Unix(int64(lastSeen[i]), 0).UTC()
			}
			switch c.kind {
			case 0:
				listed = append(listed, c)
			case 1:
				listed = append(listed, c)
				fresh = append(fresh, c)
			case 2:
				gone = append(gone, c)
			}
		}
		r.NewCount += int(newCallers)
		r.ResolvedCount += int(resolved)
		r.Totals.BlockerCallers += int(callers)
		if b.Findings == 0 {
			return nil // nobody relies on it any more: its callers are in Resolved
		}
		b.New = prev == 0
		b.CallerCount = int(callers)
		b.LastSeen = time.Unix(int64(last), 0).UTC()
		r.Blockers = append(r.Blockers, b)
		return nil
	})
	if err != nil {
		return err
	}
	sort.SliceStable(r.Blockers, func(i, j int) bool {
		a, b := r.Blockers[i], r.Blockers[j]
		if a.Findings != b.Findings {
			return a.Findings > b.Findings
		}
		return a.API() < b.API()
	})
	idx := make(map[Key]int, len(r.Blockers))
	for i, b := range r.Blockers {
		idx[b.Key] = i
	}
	busiest := func(cs []listedCaller, n func(listedCaller) uint64) {
		sort.SliceStable(cs, func(i, j int) bool { return n(cs[i]) > n(cs[j]) })
	}
	this := func(c listedCaller) uint64 { return c.this }
	busiest(listed, this)
	for _, c := range listed {
		if i, ok := idx[c.key]; ok && len(r.Blockers[i].Callers) < o.CallersPerBlocker {
			cl := c.caller
			cl.Count, cl.New = c.this, c.prev == 0
			r.Blockers[i].Callers = append(r.Blockers[i].Callers, cl)
		}
	}
	busiest(fresh, this)
	for _, c := range fresh[:min(len(fresh), o.MaxChanges)] {
		r.New = append(r.New, Change{Key: c.key, Username: c.caller.Username, UserAgent: c.caller.UserAgent, Namespace: c.caller.Namespace, Count: c.this})
	}
	busiest(gone, func(c listedCaller) uint64 { return c.prev })
	for _, c := range gone[:min(len(gone), o.MaxChanges)] {
		r.Resolved = append(r.Resolved, Change{Key: c.key, Username: c.caller.Username, UserAgent: c.caller.UserAgent, Namespace: c.caller.Namespace, Count: c.prev})
	}
	return nil
}

// listedCaller is one of the callers the blockers query lists.
type listedCaller struct {
	key        Key
	caller     Caller
	this, prev uint64
	kind       uint8
}
