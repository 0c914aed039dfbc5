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
	// MaxCallers caps the blocker callers read (both weeks together); default 200000.
	// Beyond it the report is marked Truncated and new/resolved are approximate.
	MaxCallers int
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
	defaultMaxCallers = 200000
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
	if o.MaxCallers == 0 {
		o.MaxCallers = defaultMaxCallers
	}
	if o.MaxCallers < 1 {
		return fmt.Errorf("max callers %d: want at least 1", o.MaxCallers)
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

type callerRow struct {
	Key
	replacement, message string
	caller               Caller
	thisWeek             bool
}

// blockers fills Blockers, New, Resolved and Totals.BlockerCallers from the blocking findings
// of this week and the week before, grouped by what blocks and who called.
func blockers(ctx context.Context, db *sql.DB, o Options, r *Report) error {
	prev := r.WeekStart.AddDate(0, 0, -7)
	q := `SELECT rule_id, api_group, api_version, resource, removed_in,
  username, user_agent, namespace,
  toUInt8(event_time >= toDateTime(?)) AS this_week,
  any(replacement) AS replacement, any(message) AS message,
  toUInt64(` + identity + `) AS findings,
  toUInt32(min(event_time)) AS first_seen, toUInt32(max(event_time)) AS last_seen
FROM ` + o.Table + `
WHERE cluster = ? AND event_time >= toDateTime(?) AND event_time < toDateTime(?) AND ` + blockingExpr + `
GROUP BY rule_id, api_group, api_version, resource, removed_in, username, user_agent, namespace, this_week
ORDER BY this_week DESC, findings DESC, rule_id, api_group, api_version, resource, username, user_agent, namespace
LIMIT ?`
	rows, err := db.QueryContext(ctx, q, r.WeekStart.Unix(), o.Cluster, prev.Unix(), r.WeekEnd.Unix(), o.Target.Ordinal(), o.MaxCallers+1)
	if err != nil {
		return fmt.Errorf("query blockers: %w", err)
	}
	defer rows.Close()
	var all []callerRow
	for rows.Next() {
		var c callerRow
		var thisWeek uint8
		var first, last uint32
		if err := rows.Scan(&c.RuleID, &c.APIGroup, &c.APIVersion, &c.Resource, &c.RemovedIn,
			&c.caller.Username, &c.caller.UserAgent, &c.caller.Namespace, &thisWeek,
			&c.replacement, &c.message, &c.caller.Count, &first, &last); err != nil {
			return fmt.Errorf("read blockers: %w", err)
		}
		c.thisWeek = thisWeek == 1
		c.caller.FirstSeen = time.Unix(int64(first), 0).UTC()
		c.caller.LastSeen = time.Unix(int64(last), 0).UTC()
		all = append(all, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read blockers: %w", err)
	}
	if len(all) > o.MaxCallers {
		all = all[:o.MaxCallers]
		r.Truncated = true
	}
	assemble(r, all)
	trim(r, o.CallersPerBlocker, o.MaxChanges)
	return nil
}

type callerKey struct {
	Key
	user, agent, ns string
}

// assemble groups caller rows (this week's first) into blockers and the week-over-week changes.
func assemble(r *Report, rows []callerRow) {
	prevCallers := map[callerKey]uint64{}
	prevKeys := map[Key]bool{}
	thisCallers := map[callerKey]bool{}
	for _, c := range rows {
		if !c.thisWeek {
			prevCallers[callerKey{c.Key, c.caller.Username, c.caller.UserAgent, c.caller.Namespace}] = c.caller.Count
			prevKeys[c.Key] = true
		}
	}
	idx := map[Key]int{}
	r.Blockers = []Blocker{}
	r.New = []Change{}
	r.Resolved = []Change{}
	for _, c := range rows {
		if !c.thisWeek {
			continue
		}
		ck := callerKey{c.Key, c.caller.Username, c.caller.UserAgent, c.caller.Namespace}
		thisCallers[ck] = true
		i, ok := idx[c.Key]
		if !ok {
			i = len(r.Blockers)
			idx[c.Key] = i
			r.Blockers = append(r.Blockers, Blocker{Key: c.Key, Replacement: c.replacement, Message: c.message, New: !prevKeys[c.Key]})
		}
		b := &r.Blockers[i]
		caller := c.caller
		_, seen := prevCallers[ck]
		caller.New = !seen
		b.Callers = append(b.Callers, caller)
		b.Findings += caller.Count
		if caller.New {
			r.New = append(r.New, Change{Key: c.Key, Username: caller.Username, UserAgent: caller.UserAgent, Namespace: caller.Namespace, Count: caller.Count})
		}
	}
	for _, c := range rows {
		ck := callerKey{c.Key, c.caller.Username, c.caller.UserAgent, c.caller.Namespace}
		if !c.thisWeek && !thisCallers[ck] {
			r.Resolved = append(r.Resolved, Change{Key: c.Key, Username: c.caller.Username, UserAgent: c.caller.UserAgent, Namespace: c.caller.Namespace, Count: c.caller.Count})
		}
	}
	r.Totals.BlockerCallers = len(thisCallers)
	sort.SliceStable(r.Blockers, func(i, j int) bool {
		a, b := r.Blockers[i], r.Blockers[j]
		if a.Findings != b.Findings {
			return a.Findings > b.Findings
		}
		return a.API() < b.API()
	})
}

// trim keeps the busiest perBlocker callers of each blocker and maxChanges of New and
// Resolved (rows arrive busiest first), after everything was counted.
func trim(r *Report, perBlocker, maxChanges int) {
	for i := range r.Blockers {
		b := &r.Blockers[i]
		b.CallerCount = len(b.Callers)
		if len(b.Callers) > perBlocker {
			b.Callers = b.Callers[:perBlocker]
		}
	}
	r.NewCount, r.ResolvedCount = len(r.New), len(r.Resolved)
	sort.SliceStable(r.Resolved, func(i, j int) bool { return r.Resolved[i].Count > r.Resolved[j].Count })
	if len(r.New) > maxChanges {
		r.New = r.New[:maxChanges]
	}
	if len(r.Resolved) > maxChanges {
		r.Resolved = r.Resolved[:maxChanges]
	}
}
