// Package weekly builds the weekly upgrade-risk report from the findings in ClickHouse.
//
// # What blocks an upgrade
//
// A finding blocks the upgrade to target X.Y when what it uses is removed in a release at or
// before X.Y: its removed_in is set and, compared numerically (1.9 < 1.16), not after the
// target. That covers every rule that names a removal release: removed-api (catalogue or the
// apiserver's k8s.io/removed-release annotation, so also removals still ahead of the running
// version), psp (1.25), service-topology-keys (1.22), legacy-auth-provider-client (1.26),
// seccomp-alpha-annotation (non-functional 1.27), as classify sets removed_in. Findings with
// no removal release (deprecated-api, legacy-sa-token, pod-security-violation, beta labels,
// CSR key usages) are counted in the totals and trend but never listed as blockers: the
// upgrade does not break them. A malformed removed_in never blocks.
//
// # Counting
//
// Every count is of distinct findings by identity (cluster, audit_id, rule_id, request_received:
// package store), never of rows:
// a finding delivered twice is stored twice until the ReplacingMergeTree merges. The queries
// read the day rows of package rollup: per day and caller, the distinct findings. A finding
// has one event_time, so per-day distinct counts add up exactly to weeks. Weeks are seven
// UTC days ending with WeekEnding; "new" and "resolved" compare blocker callers (blocker,
// user, user agent, namespace) with the week before.
package weekly

import (
	"fmt"
	"time"

	"github.com/auditlens/auditlens/lib/kubeapi"
)

// Report is one week of findings for one cluster, judged against a target Kubernetes version.
// Every count counts a finding once by its identity (package store).
type Report struct {
	Cluster string  `json:"cluster"`
	Target  Version `json:"target_version"`
	// Current is the release the cluster runs (zero: unknown), CurrentWhy where it was read:
	// the blockers removed at or before it are failing already (Blocker.FailingNow).
	Current    Version `json:"current_version,omitzero"`
	CurrentWhy string  `json:"current_version_source,omitempty"`
	// Coverage says what the week's events were (console.Coverage: inputs, levels, request
	// bodies; "" when no heartbeat said), NotChecked what the report could not check.
	Coverage   string `json:"coverage,omitempty"`
	NotChecked string `json:"not_checked,omitempty"`
	// WeekStart and WeekEnd bound the week: [WeekStart, WeekEnd), UTC.
	WeekStart time.Time `json:"week_start"`
	WeekEnd   time.Time `json:"week_end"`
	// WeekEnding is the last day of the week (WeekEnd minus one day).
	WeekEnding  Date      `json:"week_ending"`
	GeneratedAt time.Time `json:"generated_at"`

	Totals Totals `json:"totals"`
	// Blockers are what blocks the upgrade to Target: what the upgrade breaks first, then
	// what is failing already (FailingNow), each part most findings first.
	Blockers []Blocker `json:"blockers"`
	// Accepted are blockers that an acknowledged risk accepts until a day (Accept).
	Accepted []Accepted `json:"accepted,omitempty"`
	// Notices are acknowledgements to review: without expiry, expired, unused.
	Notices []Notice `json:"notices,omitempty"`
	// New are the blocker callers seen this week but not the week before (the busiest,
	// NewCount in all).
	New      []Change `json:"new"`
	NewCount int      `json:"new_count"`
	// Resolved are the blocker callers seen the week before but not this week (the
	// busiest, ResolvedCount in all).
	Resolved      []Change `json:"resolved"`
	ResolvedCount int      `json:"resolved_count"`
	// Migrated are the blocker callers that called the replacement after their last call of
	// the removed API this week (the newest moves first, MigratedCount in all): fixed at once,
	// not blocking, until they call the removed API again.
	Migrated      []Migration `json:"migrated"`
	MigratedCount int         `json:"migrated_count"`
	// Daily is the trend over the days of this week, Weekly over the last weeks (oldest first,
	// this week last).
	Daily  []Point `json:"daily"`
	Weekly []Point `json:"weekly"`
}

// Totals sums the week.
type Totals struct {
	Findings         uint64      `json:"findings"`
	Blocking         uint64      `json:"blocking"`
	PreviousFindings uint64      `json:"previous_findings"`
	PreviousBlocking uint64      `json:"previous_blocking"`
	BlockerCallers   int         `json:"blocker_callers"`
	ByRule           []RuleCount `json:"by_rule"`
}

// RuleCount is the number of findings of one rule this week and the week before.
type RuleCount struct {
	RuleID   string `json:"rule_id"`
	Findings uint64 `json:"findings"`
	Previous uint64 `json:"previous"`
	Blocking uint64 `json:"blocking"`
}

// Key says what blocks: a rule and, for API removals, the API used.
type Key struct {
	RuleID     string `json:"rule_id"`
	APIGroup   string `json:"api_group"`
	APIVersion string `json:"api_version"`
	Resource   string `json:"resource"`
	RemovedIn  string `json:"removed_in"`
}

// API is "group/version resource" ("v1 resource" for the core group), or "" when the key
// names no API.
func (k Key) API() string { return kubeapi.Name(k.APIGroup, k.APIVersion, k.Resource) }

// Blocker is one thing that breaks on the upgrade, with who still relies on it.
type Blocker struct {
	Key
	Replacement string `json:"replacement"`
	Message     string `json:"message"`
	Findings    uint64 `json:"findings"`
	// New is set when nobody relied on it the week before.
	New bool `json:"new"`
	// FailingNow is set when it was removed at or before the release the cluster runs: its
	// callers get 404 today, upgrade or not (MarkFailingNow).
	FailingNow bool `json:"failing_now"`
	// LastSeen is the time of its last use in the week.
	LastSeen time.Time `json:"last_seen"`
	// Expired is the acceptance of this blocker that ran out: it blocks again.
	Expired *Acceptance `json:"expired_acceptance,omitempty"`
	// Callers are the busiest callers, CallerCount in all.
	Callers     []Caller `json:"callers"`
	CallerCount int      `json:"caller_count"`
}

// Caller is who relied on a blocker this week.
type Caller struct {
	Username  string    `json:"username"`
	UserAgent string    `json:"user_agent"`
	Namespace string    `json:"namespace"`
	Count     uint64    `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// New is set when this caller did not rely on the blocker the week before.
	New bool `json:"new"`
}

// Change is a blocker caller that appeared or went away since the week before.
type Change struct {
	Key
	Username  string `json:"username"`
	UserAgent string `json:"user_agent"`
	Namespace string `json:"namespace"`
	// Count is this week's findings for New, the previous week's for Resolved.
	Count uint64 `json:"count"`
}

// Migration is a caller (user and user agent) that moved off a blocker: its Findings of the
// blocker, the last at LastSeen, are fixed by its call of the replacement at MigratedAt.
type Migration struct {
	Key
	Username   string    `json:"username"`
	UserAgent  string    `json:"user_agent"`
	Findings   uint64    `json:"findings"`
	LastSeen   time.Time `json:"last_seen"`
	MigratedAt time.Time `json:"migrated_at"`
}

// Point is one day or week of the trend.
type Point struct {
	Start    time.Time `json:"start"`
	Findings uint64    `json:"findings"`
	Blocking uint64    `json:"blocking"`
}

// Date is a calendar day, written as 2006-01-02.
type Date struct{ time.Time }

// DateLayout is how a Date is written and parsed.
const DateLayout = "2006-01-02"

// ParseDate parses a 2006-01-02 day as midnight UTC.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(DateLayout, s)
	if err != nil {
		return Date{}, err
	}
	return Date{t}, nil
}

// The weeks a report can cover: ClickHouse stores DateTime from 1970 to 2106, and a report
// reads up to two years of trend before its week.
var (
	MinWeekEnding = Date{time.Date(1972, 1, 1, 0, 0, 0, 0, time.UTC)}
	MaxWeekEnding = Date{time.Date(2105, 12, 31, 0, 0, 0, 0, time.UTC)}
)

// CheckWeekEnding reports a week ending outside MinWeekEnding..MaxWeekEnding (e.g.
// 0001-01-01, which would otherwise reach the database and fail there).
func CheckWeekEnding(d Date) error {
	if d.Before(MinWeekEnding.Time) || d.After(MaxWeekEnding.Time) {
		return fmt.Errorf("want a day from %s to %s", MinWeekEnding, MaxWeekEnding)
	}
	return nil
}

// DateOf is the calendar day of t in its location, as midnight UTC.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{time.Date(y, m, d, 0, 0, 0, 0, time.UTC)}
}

func (d Date) String() string { return d.Format(DateLayout) }

// MarshalText implements encoding.TextMarshaler.
func (d Date) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Date) UnmarshalText(b []byte) error {
	v, err := ParseDate(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// LastWeekEnding is the last day of the latest full Monday-to-Sunday week before the day of
// now: on a Monday, the day before; on a Sunday, the Sunday a week before.
func LastWeekEnding(now time.Time) Date {
	d := DateOf(now)
	back := int(d.Weekday()) // Sunday 0 .. Saturday 6
	if back == 0 {
		back = 7
	}
	return Date{d.AddDate(0, 0, -back)}
}
