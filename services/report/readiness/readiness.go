// Package readiness is the upgrade readiness gate: per cluster and target version, ready,
// blocked or unknown, and why, from the weekly report's blocker queries and the minutes in
// which the cluster's audit stream carried events (classify's heartbeats) or findings.
package readiness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/printable"
	"github.com/auditlens/auditlens/services/report/console"
	"github.com/auditlens/auditlens/services/report/weekly"
)

// States of a gate.
const (
	// Ready: the stream was alive through the window and nothing unaccepted blocks.
	Ready = "ready"
	// Blocked: something removed at or before the target was used in the window and is not
	// accepted (or its acceptance expired).
	Blocked = "blocked"
	// Unknown: nothing blocks, but the stream carried no event for longer than MaxSilence in
	// the window, so absence of blockers proves nothing.
	Unknown = "unknown"
)

// Reasons, in the CamelCase of a Kubernetes condition's reason.
const (
	ReasonNoBlockers   = "NoBlockers"
	ReasonBlockers     = "BlockersInUse"
	ReasonStreamSilent = "AuditStreamSilent"
	// ReasonNotJudged: the judgement failed (the store unreachable, a query refused); the
	// last verdict no longer holds.
	ReasonNotJudged = "NotJudged"
)

// Options say what to judge.
type Options struct {
	Cluster string
	Target  weekly.Version
	// Current is the release the cluster runs (zero: unknown), CurrentWhy where it was read:
	// the blockers removed at or before it are failing already, named apart.
	Current    weekly.Version
	CurrentWhy string
	// Window is how far back from Now blockers are looked for; default 7 days (the weekly
	// report's week).
	Window time.Duration
	// MaxSilence is the longest stretch of the window without any event (heartbeat or
	// finding) from the cluster that still counts as a live stream; default one hour.
	MaxSilence time.Duration
	// CallersPerBlocker caps the callers listed under each blocker; default 25.
	CallersPerBlocker int
	// Acceptor decides which blockers are acknowledged risks; nil accepts none.
	Acceptor weekly.Acceptor
	// Now is the end of the window; default time.Now.
	Now func() time.Time
	// Table, MinutesTable and EventMinutesTable default to the store's findings,
	// stream_minutes (minutes with findings) and event_minutes (minutes with events, from
	// classify's heartbeats).
	Table, MinutesTable, EventMinutesTable string
}

// maxMigrated caps the migrated callers a Result lists (MigratedCount counts them all).
const maxMigrated = 100

// Defaults of Options.
const (
	DefaultWindow     = 7 * 24 * time.Hour
	DefaultMaxSilence = time.Hour
)

func (o *Options) fill() error {
	if o.Cluster == "" {
		return errors.New("cluster is empty")
	}
	if o.Target.IsZero() {
		return errors.New("target version is not set")
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxSilence == 0 {
		o.MaxSilence = DefaultMaxSilence
	}
	if o.Window < time.Minute || o.MaxSilence < time.Minute {
		return fmt.Errorf("window %s, max silence %s: want at least a minute each", o.Window, o.MaxSilence)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MinutesTable == "" {
		o.MinutesTable = "stream_minutes"
	}
	if o.EventMinutesTable == "" {
		o.EventMinutesTable = "event_minutes"
	}
	return nil
}

// Stream says whether the cluster's audit stream was alive through the window.
type Stream struct {
	Alive bool `json:"alive"`
	// LastEvent is the start of the last minute with an event in the window (zero: none).
	LastEvent time.Time `json:"last_event,omitzero"`
	// FirstEvent is the start of the first minute with an event ever stored for the cluster
	// (zero: none ever): silence is counted from it when it is inside the window, so a cluster
	// installed an hour ago is judged on that hour, not on the week before it existed.
	FirstEvent time.Time `json:"first_event,omitzero"`
	// LongestSilence is the longest stretch without events, SilentFrom to SilentUntil.
	LongestSilence Duration  `json:"longest_silence"`
	SilentFrom     time.Time `json:"silent_from"`
	SilentUntil    time.Time `json:"silent_until"`
	// ActiveMinutes counts the minutes of the window with events.
	ActiveMinutes int `json:"active_minutes"`
}

// Duration is a time.Duration written as "1h30m0s" in JSON.
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Result is the gate of one cluster and target.
type Result struct {
	Cluster string         `json:"cluster"`
	Target  weekly.Version `json:"target_version"`
	// Current is the release the cluster runs (zero: unknown) and CurrentWhy where it was
	// read; Blockers lists what the upgrade breaks first, then what fails already
	// (Blocker.FailingNow), counted in NewBlockers and FailingNow.
	Current     weekly.Version `json:"current_version,omitzero"`
	CurrentWhy  string         `json:"current_version_source,omitempty"`
	NewBlockers int            `json:"new_blockers"`
	FailingNow  int            `json:"failing_now"`
	// Hops is, for an upgrade that skips releases (1.35 to 1.38), what each release on the
	// way removes that is still in use, in order; empty for one step or an unknown release.
	Hops    []Hop  `json:"hops,omitempty"`
	State   string `json:"state"`
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// WindowStart and WindowEnd bound what was looked at: [start, end).
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	Stream      Stream    `json:"stream"`
	// Blockers block (an expired acceptance is named on the blocker); Accepted do not.
	Blockers []weekly.Blocker  `json:"blockers"`
	Accepted []weekly.Accepted `json:"accepted"`
	// Migrated are the callers that called the replacement after their last call of a blocker
	// in the window (the newest first, MigratedCount in all): they do not block, and block
	// again if they call the removed API later.
	Migrated      []weekly.Migration `json:"migrated"`
	MigratedCount int                `json:"migrated_count"`
	// Coverage is what the verdict rests on (classify's heartbeats): the inputs and audit
	// levels of the window's events and whether the request-body rules saw a body; Unchecked
	// names what it could not check ("" when nothing), and the message says so too.
	Coverage  console.Coverage `json:"coverage"`
	Unchecked string           `json:"not_checked,omitempty"`
}

// Hop is one release of an upgrade that skips releases and the blockers it removes, by name
// (their API, else their rule; none: the hop needs nothing).
type Hop struct {
	Release  weekly.Version `json:"release"`
	Blockers []string       `json:"blockers"`
}

// hopsOf names the blockers of each hop from current to target (weekly.Hops); nil for one
// step.
func hopsOf(bs []weekly.Blocker, current, target weekly.Version) []Hop {
	hs := weekly.Hops(bs, current, target)
	if len(hs) < 2 {
		return nil
	}
	out := make([]Hop, len(hs))
	for i, h := range hs {
		out[i] = Hop{Release: h.Release, Blockers: []string{}}
		for _, b := range h.Blockers {
			out[i].Blockers = append(out[i].Blockers, name(b.Key))
		}
	}
	return out
}

// Evaluate reads the window ending at o.Now from db and judges the gate.
func Evaluate(ctx context.Context, db *sql.DB, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, fmt.Errorf("%w: %w", weekly.ErrInvalid, err)
	}
	end := o.Now().UTC().Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-o.Window)
	bs, err := weekly.Blockers(ctx, db, weekly.Window{Cluster: o.Cluster, Target: o.Target, Start: start, End: end,
		Table: o.Table, CallersPerBlocker: o.CallersPerBlocker})
	if err != nil {
		return nil, err
	}
	st, err := stream(ctx, db, o, start, end)
	if err != nil {
		return nil, err
	}
	moved, nMoved, err := weekly.Migrations(ctx, db, weekly.Window{Cluster: o.Cluster, Target: o.Target, Start: start, End: end, Table: o.Table},
		maxMigrated)
	if err != nil {
		return nil, err
	}
	if o.Current.IsZero() {
		// The release the control plane named last (classify's heartbeats), else the newest
		// kubelet or controller manager among the findings.
		if o.Current, o.CurrentWhy, err = (console.Reader{DB: db}).ClusterRelease(ctx, o.Cluster, end); err != nil {
			return nil, err
		}
	}
	cov, err := (console.Reader{DB: db, Table: o.Table}).Coverage(ctx, o.Cluster, console.Window{From: start, To: end})
	if err != nil {
		return nil, err
	}
	r := &Result{Cluster: o.Cluster, Target: o.Target, Current: o.Current, CurrentWhy: o.CurrentWhy, WindowStart: start, WindowEnd: end, Stream: st,
		Coverage: cov, Unchecked: cov.UncheckedFor(o.Target), Migrated: moved, MigratedCount: nMoved}
	r.Blockers, r.Accepted = weekly.Split(bs, o.Acceptor, o.Now())
	r.NewBlockers, r.FailingNow = weekly.MarkFailingNow(r.Blockers, o.Current)
	r.Hops = hopsOf(r.Blockers, o.Current, o.Target)
	switch {
	case len(r.Blockers) > 0:
		r.State, r.Reason = Blocked, ReasonBlockers
		breaks, failing := weekly.PartsOf(r.Blockers)
		if o.Current.IsZero() {
			r.Message = fmt.Sprintf("%d blocker(s) of %s in use: %s", len(r.Blockers), o.Target, names(r.Blockers))
			break
		}
		var parts []string
		switch {
		case len(breaks) > 0 && len(r.Hops) > 0:
			var each []string
			for _, h := range r.Hops {
				if len(h.Blockers) == 0 {
					each = append(each, fmt.Sprintf("%s needs nothing", h.Release))
				} else {
					each = append(each, fmt.Sprintf("%s removes %d (%s)", h.Release, len(h.Blockers), strings.Join(h.Blockers[:min(3, len(h.Blockers))], ", ")))
				}
			}
			parts = append(parts, fmt.Sprintf("%d removed after %s, the cluster's release: %s", len(breaks), o.Current, strings.Join(each, ", ")))
		case len(breaks) > 0:
			parts = append(parts, fmt.Sprintf("%d removed after %s, the cluster's release: %s", len(breaks), o.Current, names(breaks)))
		}
		if len(failing) > 0 {
			parts = append(parts, fmt.Sprintf("%d failing now, removed at or before %s: %s", len(failing), o.Current, names(failing)))
		}
		r.Message = fmt.Sprintf("%d blocker(s) of %s in use: %s", len(r.Blockers), o.Target, strings.Join(parts, "; "))
	case st.FirstEvent.IsZero():
		r.State, r.Reason = Unknown, ReasonStreamSilent
		r.Message = fmt.Sprintf("no event from cluster %s has ever been stored: its audit stream is not set up, or --cluster names another cluster", o.Cluster)
	case !st.Alive:
		r.State, r.Reason = Unknown, ReasonStreamSilent
		r.Message = fmt.Sprintf("no events from cluster %s for %s (%s to %s, longer than %s): its audit stream may be down",
			o.Cluster, time.Duration(st.LongestSilence), st.SilentFrom.Format(time.RFC3339), st.SilentUntil.Format(time.RFC3339), o.MaxSilence)
	default:
		r.State, r.Reason, r.Ready = Ready, ReasonNoBlockers, true
		r.Message = fmt.Sprintf("nothing removed at or before %s was used in the window", o.Target)
		if len(r.Accepted) > 0 {
			r.Message += fmt.Sprintf(" but %d accepted risk(s)", len(r.Accepted))
		}
	}
	if e := cov.Expired.String(); e != "" && r.State == Unknown {
		// Silent because what came was too old to keep: say so, and how to keep it.
		r.Message += "; " + e
	}
	if r.MigratedCount > 0 && r.State != Unknown {
		m := r.Migrated[0]
		r.Message += fmt.Sprintf("; %d caller(s) moved to the replacement and no longer block, the last %s (%s) at %s",
			r.MigratedCount, printable.String(m.Username), name(m.Key), m.MigratedAt.Format(time.RFC3339))
	}
	if r.Unchecked != "" && r.State != Unknown {
		// A verdict, ready or not, that rests on part of the rules says which part it lacks.
		r.Message += "; not checked: " + r.Unchecked
	}
	return r, nil
}

// names are the first three blockers of bs by name, and how many more.
func names(bs []weekly.Blocker) string {
	out := make([]string, 0, 3)
	for _, b := range bs[:min(3, len(bs))] {
		out = append(out, name(b.Key))
	}
	more := ""
	if len(bs) > 3 {
		more = fmt.Sprintf(" and %d more", len(bs)-3)
	}
	return strings.Join(out, ", ") + more
}

// name is what a message calls a blocker: its API for the API rules ("extensions/v1beta1
// ingresses"), its rule and subject for the others ("gitrepo-volume v1 pods", "version-skew
// kubelet 1.33"), else its rule.
func name(k weekly.Key) string {
	a := k.API()
	switch {
	case a == "":
		return k.RuleID
	case k.RuleID == "removed-api" || k.RuleID == "deprecated-api" || k.RuleID == "psp":
		return a
	}
	return k.RuleID + " " + a
}

// stream reads the minutes of the window with events and finds the longest silence,
// counting from the window's start (or the cluster's first event, when later) and up to its
// end. A minute has events when a heartbeat
// says so (event_minutes) or when it has a finding (stream_minutes): the latter keeps the gate
// right for a classify that sends no heartbeats (older, or --classify-heartbeat-interval 0).
func stream(ctx context.Context, db *sql.DB, o Options, start, end time.Time) (Stream, error) {
	rows, err := db.QueryContext(ctx, `SELECT m FROM (
  SELECT toUInt32(minute) AS m FROM `+o.MinutesTable+`
  WHERE cluster = ? AND minute >= toDateTime(?) AND minute < toDateTime(?)
  UNION ALL
  SELECT toUInt32(minute) AS m FROM `+o.EventMinutesTable+`
  WHERE cluster = ? AND minute >= toDateTime(?) AND minute < toDateTime(?)
)
GROUP BY m ORDER BY m`, o.Cluster, start.Unix(), end.Unix(), o.Cluster, start.Unix(), end.Unix())
	if err != nil {
		return Stream{}, fmt.Errorf("query stream minutes: %w", err)
	}
	defer rows.Close()
	var s Stream
	if s.FirstEvent, err = FirstEvent(ctx, db, o.Cluster, o.MinutesTable, o.EventMinutesTable); err != nil {
		return Stream{}, err
	}
	prev := start // the end of the last minute with events, or where silence starts to count
	if s.FirstEvent.After(start) {
		prev = s.FirstEvent
	}
	gap := func(from, until time.Time) {
		if d := until.Sub(from); d > time.Duration(s.LongestSilence) {
			s.LongestSilence, s.SilentFrom, s.SilentUntil = Duration(d), from, until
		}
	}
	for rows.Next() {
		var m uint32
		if err := rows.Scan(&m); err != nil {
			return Stream{}, fmt.Errorf("read stream minutes: %w", err)
		}
		t := time.Unix(int64(m), 0).UTC()
		gap(prev, t)
		prev = t.Add(time.Minute)
		s.LastEvent = t
		s.ActiveMinutes++
	}
	if err := rows.Err(); err != nil {
		return Stream{}, fmt.Errorf("read stream minutes: %w", err)
	}
	gap(prev, end)
	s.Alive = time.Duration(s.LongestSilence) <= o.MaxSilence
	return s, nil
}

// FirstEvent is the first minute with events ever stored for cluster, in the findings'
// minutes or classify's heartbeats (zero: none).
func FirstEvent(ctx context.Context, db *sql.DB, cluster, minutesTable, eventMinutesTable string) (time.Time, error) {
	// min() of no rows is 0 in ClickHouse: such a table is left out, not taken for 1970.
	var m uint32
	err := db.QueryRowContext(ctx, `SELECT min(m) FROM (
  SELECT toUInt32(min(minute)) AS m FROM `+minutesTable+` WHERE cluster = ?
  UNION ALL
  SELECT toUInt32(min(minute)) AS m FROM `+eventMinutesTable+` WHERE cluster = ?
) WHERE m > 0`, cluster, cluster).Scan(&m)
	if err != nil {
		return time.Time{}, fmt.Errorf("query the first event of cluster %s: %w", cluster, err)
	}
	if m == 0 {
		return time.Time{}, nil
	}
	return time.Unix(int64(m), 0).UTC(), nil
}

// KnownClusters are the clusters with events (heartbeats or findings) stored from since on
// (zero: ever), in name order.
func KnownClusters(ctx context.Context, db *sql.DB, since time.Time) ([]string, error) {
	from := max(since.Unix(), 0)
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT c FROM (
  SELECT toString(cluster) AS c FROM stream_minutes WHERE minute >= toDateTime(?)
  UNION ALL
  SELECT toString(cluster) AS c FROM event_minutes WHERE minute >= toDateTime(?)
)`, from, from)
	if err != nil {
		return nil, fmt.Errorf("query clusters: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("read clusters: %w", err)
		}
		out = append(out, c)
	}
	slices.Sort(out) // ClickHouse 18.16 does not keep ORDER BY 1 after DISTINCT
	return out, rows.Err()
}

// Sort orders results by cluster, then target.
func Sort(rs []*Result) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Cluster != rs[j].Cluster {
			return rs[i].Cluster < rs[j].Cluster
		}
		return rs[i].Target.Less(rs[j].Target)
	})
}
