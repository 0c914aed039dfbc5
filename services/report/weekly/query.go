package weekly

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"
)

// Options select what Build reports.
type Options struct {
	// Cluster whose findings are reported.
	Cluster string
	// Target is the Kubernetes version the cluster is to be upgraded to.
	Target Version
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
	if o.Cluster == "" {
		return errors.New("cluster is empty")
	}
	if o.Target.IsZero() {
		return errors.New("target version is not set")
	}
	if o.WeekEnding.IsZero() {
		return errors.New("week ending is not set")
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
// parameter (Version.Ordinal): what it uses is removed in a release at or before the target.
// removed_in_key is the store's numeric form of removed_in (MAJOR*1000+MINOR, 0 when empty or
// malformed), so versions compare as numbers (1.9 < 1.16) and an unknown removal never blocks.
const blockingExpr = `(removed_in_key >= 1000 AND removed_in_key <= ?)`

// identity counts each finding once, however often it was stored.
const identity = `uniqExact(cluster, audit_id, rule_id)`

const day = 24 * time.Hour

// Build reads the week o.WeekEnding of o.Cluster from db and assembles the report. It runs
// the same SQL on ClickHouse 18.16 and on current ClickHouse (chDB), with ? parameters only.
func Build(ctx context.Context, db *sql.DB, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	end := o.WeekEnding.AddDate(0, 0, 1)
	start := end.AddDate(0, 0, -7)
	r := &Report{
		Cluster:     o.Cluster,
		Target:      o.Target,
		WeekStart:   start,
		WeekEnd:     end,
		WeekEnding:  o.WeekEnding,
		GeneratedAt: o.Now().UTC().Truncate(time.Second),
	}
	if err := trend(ctx, db, o, r); err != nil {
		return nil, err
	}
	if err := blockers(ctx, db, o, r); err != nil {
		return nil, err
	}
	return r, nil
}

// trend fills Totals (but BlockerCallers), Daily and Weekly from one query over the trend
// weeks grouped by rule, blocking and day. A finding lies in one day, so sums of per-day
// distinct counts stay exact.
func trend(ctx context.Context, db *sql.DB, o Options, r *Report) error {
	from := r.WeekEnd.AddDate(0, 0, -7*o.TrendWeeks)
	q := `SELECT rule_id, toUInt8(` + blockingExpr + `) AS blocking,
  toUInt32(intDiv(toUInt32(event_time) - ?, 86400)) AS day,
  toUInt64(` + identity + `) AS findings
FROM ` + o.Table + `
WHERE cluster = ? AND event_time >= toDateTime(?) AND event_time < toDateTime(?)
GROUP BY rule_id, blocking, day`
	rows, err := db.QueryContext(ctx, q, o.Target.Ordinal(), from.Unix(), o.Cluster, from.Unix(), r.WeekEnd.Unix())
	if err != nil {
		return fmt.Errorf("query trend: %w", err)
	}
	defer rows.Close()
	days := 7 * o.TrendWeeks
	daily := make([]Point, days)
	for i := range daily {
		daily[i].Start = from.AddDate(0, 0, i)
	}
	byRule := map[string]*RuleCount{}
	for rows.Next() {
		var rule string
		var blocking uint8
		var d uint32
		var n uint64
		if err := rows.Scan(&rule, &blocking, &d, &n); err != nil {
			return fmt.Errorf("read trend: %w", err)
		}
		if int(d) >= days {
			return fmt.Errorf("read trend: day %d outside the %d days asked", d, days)
		}
		daily[d].Findings += n
		thisWeek := int(d) >= days-7
		prevWeek := int(d) >= days-14 && !thisWeek
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
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read trend: %w", err)
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
// week before, grouped by what blocks and who called; the queries below read it with
// their own HAVING, ORDER BY and LIMIT. Its parameters: week start (this_n), week start
// (prev_n), week start (first_seen), week start (last_seen), cluster, start of the week
// before, week end, target.
func callerAgg(table string) string {
	return `SELECT rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace,
    any(replacement) AS repl, any(message) AS msg,
    toUInt64(uniqExactIf(cluster, audit_id, rule_id, event_time >= toDateTime(?))) AS this_n,
    toUInt64(uniqExactIf(cluster, audit_id, rule_id, event_time < toDateTime(?))) AS prev_n,
    toUInt32(minIf(event_time, event_time >= toDateTime(?))) AS first_seen,
    toUInt32(maxIf(event_time, event_time >= toDateTime(?))) AS last_seen
  FROM ` + table + `
  WHERE cluster = ? AND event_time >= toDateTime(?) AND event_time < toDateTime(?) AND ` + blockingExpr + `
  GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace`
}

func (r *Report) aggArgs(o Options) []any {
	s := r.WeekStart.Unix()
	return []any{s, s, s, s, o.Cluster, r.WeekStart.AddDate(0, 0, -7).Unix(), r.WeekEnd.Unix(), o.Target.Ordinal()}
}

const keyCols = `rule_id, api_group, api_version, resource, removed_in`

// blockers fills Blockers, New, Resolved and the caller counts. Counts are exact and come
// from one query per blocker; the lists hold the busiest callers only, so the rows read stay
// few however many callers there are.
func blockers(ctx context.Context, db *sql.DB, o Options, r *Report) error {
	args := r.aggArgs(o)
	// What blocks, with exact counts of findings and callers.
	q := `SELECT ` + keyCols + `, any(repl), any(msg),
  toUInt64(sum(this_n)), toUInt64(sum(prev_n)),
  toUInt64(countIf(this_n > 0)), toUInt64(countIf(this_n > 0 AND prev_n = 0)), toUInt64(countIf(this_n = 0 AND prev_n > 0))
FROM (` + callerAgg(o.Table) + `)
GROUP BY ` + keyCols
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("query blockers: %w", err)
	}
	defer rows.Close()
	idx := map[Key]int{}
	r.Blockers, r.New, r.Resolved = []Blocker{}, []Change{}, []Change{}
	for rows.Next() {
		var b Blocker
		var prev, callers, newCallers, resolved uint64
		if err := rows.Scan(&b.RuleID, &b.APIGroup, &b.APIVersion, &b.Resource, &b.RemovedIn, &b.Replacement, &b.Message,
			&b.Findings, &prev, &callers, &newCallers, &resolved); err != nil {
			return fmt.Errorf("read blockers: %w", err)
		}
		r.NewCount += int(newCallers)
		r.ResolvedCount += int(resolved)
		r.Totals.BlockerCallers += int(callers)
		if b.Findings == 0 {
			continue // nobody relies on it any more: its callers are in Resolved
		}
		b.New = prev == 0
		b.CallerCount = int(callers)
		idx[b.Key] = len(r.Blockers)
		r.Blockers = append(r.Blockers, b)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read blockers: %w", err)
	}
	sort.SliceStable(r.Blockers, func(i, j int) bool {
		a, b := r.Blockers[i], r.Blockers[j]
		if a.Findings != b.Findings {
			return a.Findings > b.Findings
		}
		return a.API() < b.API()
	})
	for i, b := range r.Blockers {
		idx[b.Key] = i
	}
	if len(r.Blockers) == 0 && r.ResolvedCount == 0 {
		return nil
	}
	order := `, username, user_agent, namespace`
	// The busiest callers of each blocker this week.
	err = eachCaller(ctx, db, `SELECT * FROM (`+callerAgg(o.Table)+`) WHERE this_n > 0
ORDER BY this_n DESC, `+keyCols+order+` LIMIT ? BY `+keyCols, append(args, o.CallersPerBlocker), func(k Key, c Caller, this, prev uint64) {
		if i, ok := idx[k]; ok {
			c.Count, c.New = this, prev == 0
			r.Blockers[i].Callers = append(r.Blockers[i].Callers, c)
		}
	})
	if err != nil {
		return fmt.Errorf("query blocker callers: %w", err)
	}
	// The busiest new and resolved callers.
	err = eachCaller(ctx, db, `SELECT * FROM (`+callerAgg(o.Table)+`) WHERE this_n > 0 AND prev_n = 0
ORDER BY this_n DESC, `+keyCols+order+` LIMIT ?`, append(args, o.MaxChanges), func(k Key, c Caller, this, _ uint64) {
		r.New = append(r.New, Change{Key: k, Username: c.Username, UserAgent: c.UserAgent, Namespace: c.Namespace, Count: this})
	})
	if err != nil {
		return fmt.Errorf("query new callers: %w", err)
	}
	err = eachCaller(ctx, db, `SELECT * FROM (`+callerAgg(o.Table)+`) WHERE this_n = 0 AND prev_n > 0
ORDER BY prev_n DESC, `+keyCols+order+` LIMIT ?`, append(args, o.MaxChanges), func(k Key, c Caller, _, prev uint64) {
		r.Resolved = append(r.Resolved, Change{Key: k, Username: c.Username, UserAgent: c.UserAgent, Namespace: c.Namespace, Count: prev})
	})
	if err != nil {
		return fmt.Errorf("query resolved callers: %w", err)
	}
	return nil
}

// eachCaller runs q over callerAgg and calls f for each row.
func eachCaller(ctx context.Context, db *sql.DB, q string, args []any, f func(k Key, c Caller, this, prev uint64)) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k Key
		var c Caller
		var repl, msg string
		var this, prev uint64
		var first, last uint32
		if err := rows.Scan(&k.RuleID, &k.APIGroup, &k.APIVersion, &k.Resource, &k.RemovedIn,
			&c.Username, &c.UserAgent, &c.Namespace, &repl, &msg, &this, &prev, &first, &last); err != nil {
			return err
		}
		if this > 0 {
			c.FirstSeen = time.Unix(int64(first), 0).UTC()
			c.LastSeen = time.Unix(int64(last), 0).UTC()
		}
		f(k, c, this, prev)
	}
	return rows.Err()
}
