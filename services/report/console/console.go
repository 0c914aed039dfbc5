// Package console reads what the web console shows: the clusters seen, the callers of one
// blocker, the requests behind one caller, one request, and a search by user, user agent or
// namespace. Counts come from the exact day rows of package rollup, the requests from the
// findings table. The same SQL runs on ClickHouse 18.16 and on chDB (and
// on a cluster's Distributed findings table), with ? parameters only; every list is bounded.
package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/auditlens/auditlens/lib/kubeapi"
	"github.com/auditlens/auditlens/lib/kubeversion"
	"github.com/auditlens/auditlens/services/report/rollup"
)

// Reader reads the findings table of DB.
type Reader struct {
	DB *sql.DB
	// Table holding the findings; default "findings" (in the connection's database).
	Table string
	// EventMinutesTable holds the minutes that carried events (classify's heartbeats);
	// default "event_minutes".
	EventMinutesTable string
}

// ErrInvalid marks an error caused by the query asked for (a bad request), not by the
// database.
var ErrInvalid = errors.New("invalid console query")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Paging bounds every list: a page holds at most MaxLimit rows and starts at most MaxOffset
// rows in, so no request makes the database sort or send more than that.
const (
	DefaultLimit = 50
	MaxLimit     = 200
	MaxOffset    = 10000
	// MaxClusters caps the clusters listed.
	MaxClusters = 500
)

// Page says which rows of a list to read: Limit rows (DefaultLimit when 0) after Offset.
type Page struct {
	Limit, Offset int
}

func (p Page) check() (Page, error) {
	if p.Limit == 0 {
		p.Limit = DefaultLimit
	}
	if p.Limit < 1 || p.Limit > MaxLimit {
		return p, invalid("limit %d: want 1 to %d", p.Limit, MaxLimit)
	}
	if p.Offset < 0 || p.Offset > MaxOffset {
		return p, invalid("offset %d: want 0 to %d", p.Offset, MaxOffset)
	}
	return p, nil
}

// Window is the time range [From, To) of the findings read.
type Window struct {
	From, To time.Time
}

func (w Window) check() error {
	if w.From.IsZero() || w.To.IsZero() || !w.From.Before(w.To) {
		return invalid("time range %s to %s: want a start before its end", w.From, w.To)
	}
	if w.From.Unix() < 0 || w.To.Unix() > 1<<32-1 {
		return invalid("time range %s to %s: outside what ClickHouse stores", w.From, w.To)
	}
	return nil
}

// BlockerKey says what a finding is about: a rule and, for API findings, the API used.
type BlockerKey struct {
	Rule     string
	Group    string
	Version  string
	Resource string
}

func (k BlockerKey) check() error {
	if k.Rule == "" {
		return invalid("rule is empty")
	}
	return nil
}

// API is "group/version resource" ("version resource" for the core group), or "" when the
// key names no API.
func (k BlockerKey) API() string { return kubeapi.Name(k.Group, k.Version, k.Resource) }

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func (r Reader) table() (string, error) {
	if r.Table == "" {
		return "findings", nil
	}
	if !identRe.MatchString(r.Table) {
		return "", fmt.Errorf("table %q: want [database.]name", r.Table)
	}
	return r.Table, nil
}

// blocking is true for a finding that blocks the upgrade to the target bound as its one
// parameter (package rollup's).
const blocking = rollup.Blocking

// ClusterSummary is one cluster seen in the findings.
type ClusterSummary struct {
	Name string
	// ThisWeek says the cluster has findings from the start of this week on, LastWeek in
	// the seven days before it.
	ThisWeek, LastWeek bool
	// Newest is the time of the newest finding; NewestBlocker that of the newest finding
	// that blocks the target (zero when none does).
	Newest, NewestBlocker time.Time
	// NewestEvent is the time of the newest audit event, finding or not: the start of the
	// newest minute classify's heartbeats say carried events, or Newest when that is later
	// (or no heartbeat came: a classify without them). Zero when neither is known.
	NewestEvent time.Time
}

// Clusters lists the clusters seen in findings or heartbeats (at most MaxClusters, by name)
// with the newest finding that blocks target and whether they have findings in the week
// starting at weekStart and the week before it.
func (r Reader) Clusters(ctx context.Context, weekStart time.Time, target kubeversion.Version) ([]ClusterSummary, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	prev := weekStart.AddDate(0, 0, -7)
	if err := (Window{prev, weekStart}).check(); err != nil {
		return nil, err
	}
	cs, err := r.ClusterList(ctx, target)
	if err != nil {
		return nil, err
	}
	// Whether the weeks have findings, from the days that received them (package rollup):
	// no count, so no merging of the day not yet compacted. What lies ahead of the weeks
	// counts in this week (a cluster's clock may run ahead).
	has, err := rollup.WeeksOf(ctx, r.DB, rollup.TablesFor(t), weekStart)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		cs[i].ThisWeek, cs[i].LastWeek = has[cs[i].Name].This, has[cs[i].Name].Last
	}
	return cs, nil
}

// ClusterList lists the clusters seen in findings or heartbeats (at most MaxClusters, by
// name) with their newest finding, newest finding that blocks target and newest event; their
// weeks are left unset (Clusters).
func (r Reader) ClusterList(ctx context.Context, target kubeversion.Version) ([]ClusterSummary, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	if target.IsZero() {
		return nil, invalid("target version is not set")
	}
	newest, err := rollup.NewestOf(ctx, r.DB, rollup.TablesFor(t), target.Key(), MaxClusters)
	if err != nil {
		return nil, err
	}
	var out []ClusterSummary
	for _, n := range newest {
		c := ClusterSummary{Name: n.Cluster, Newest: unix(n.Finding), NewestEvent: unix(n.Finding)}
		if n.Blocker > 0 {
			c.NewestBlocker = unix(n.Blocker)
		}
		out = append(out, c)
	}
	return r.withEvents(ctx, out)
}

// withEvents sets the newest event of each cluster from the heartbeats, and adds the clusters
// that sent events but no finding, keeping the list ordered by name and at most MaxClusters.
func (r Reader) withEvents(ctx context.Context, out []ClusterSummary) ([]ClusterSummary, error) {
	t := r.EventMinutesTable
	if t == "" {
		t = "event_minutes"
	}
	if !identRe.MatchString(t) {
		return nil, fmt.Errorf("table %q: want [database.]name", t)
	}
	at := make(map[string]int, len(out))
	for i, c := range out {
		at[c.Name] = i
	}
	q := `SELECT toString(cluster) AS c, toUInt32(max(minute)) FROM ` + t + `
GROUP BY c
ORDER BY c
LIMIT ?`
	err := each(ctx, r.DB, "newest events", q, []any{MaxClusters}, func(rows rollup.Row) error {
		var name string
		var newest uint32
		if err := rows.Scan(&name, &newest); err != nil {
			return err
		}
		i, ok := at[name]
		if !ok {
			out = append(out, ClusterSummary{Name: name, Newest: unix(0), NewestEvent: unix(newest)})
			return nil
		}
		if e := unix(newest); e.After(out[i].NewestEvent) {
			out[i].NewestEvent = e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out[:min(len(out), MaxClusters)], nil
}

// each runs q and calls f for each row; what names the query in errors (package rollup's
// Query: bounded by ctx's deadline).
func each(ctx context.Context, db *sql.DB, what, q string, args []any, f func(rollup.Row) error) error {
	return rollup.Query(ctx, db, what, q, args, f)
}

// Releases lists the removal releases named by the findings of cluster (what its blockers
// can be judged against), oldest first.
func (r Reader) Releases(ctx context.Context, cluster string) ([]kubeversion.Version, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	keys, err := rollup.RemovedIn(ctx, r.DB, rollup.TablesFor(t), cluster, 200)
	if err != nil {
		return nil, err
	}
	var out []kubeversion.Version
	for _, k := range keys {
		v := kubeversion.Version{Major: int(k) / (kubeversion.MaxMinor + 1), Minor: int(k) % (kubeversion.MaxMinor + 1)}
		if v.Key() == int(k) {
			out = append(out, v)
		}
	}
	return out, nil
}

// Known reports whether any finding names cluster (a look-up in the table's order key).
func (r Reader) Known(ctx context.Context, cluster string) (bool, error) {
	t, err := r.table()
	if err != nil {
		return false, err
	}
	// Findings, else the minutes that carried events: a cluster whose events named no finding,
	// or whose findings all expired, is still one the first screen lists.
	for _, from := range []string{t, r.eventMinutes(t)} {
		var n uint8
		err = r.DB.QueryRowContext(ctx, rollup.Bounded(ctx, `SELECT toUInt8(1) FROM `+from+` WHERE cluster = ? LIMIT 1`), cluster).Scan(&n)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("query cluster: %w", err)
		}
	}
	return false, nil
}

// eventMinutes is EventMinutesTable, by default event_minutes beside the findings table t.
func (r Reader) eventMinutes(t string) string {
	if r.EventMinutesTable != "" {
		return r.EventMinutesTable
	}
	return t[:strings.LastIndexByte(t, '.')+1] + "event_minutes"
}

// Names lists the clusters the findings or the minutes that carried events name (at most
// MaxClusters, by name).
func (r Reader) Names(ctx context.Context) ([]string, error) {
	t, err := r.table()
	if err != nil {
		return nil, err
	}
	out, err := rollup.Clusters(ctx, r.DB, rollup.TablesFor(t), MaxClusters)
	if err != nil {
		return nil, err
	}
	err = each(ctx, r.DB, "cluster names", `SELECT DISTINCT toString(cluster) AS c FROM `+r.eventMinutes(t)+` ORDER BY c LIMIT ?`, []any{MaxClusters},
		func(rows rollup.Row) error {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			out = append(out, n)
			return nil
		})
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), MaxClusters)], err
}

// days returns the source of the day rows of cluster over the whole days of w (package
// rollup) for the findings table t, with the columns cols (rollup.Filter.Columns), limited
// by the condition where on the rows' key columns.
func (r Reader) days(ctx context.Context, t, cluster string, w Window, cols []string, where string, args ...any) (string, []any, error) {
	return r.daysOf(ctx, t, cluster, w, rollup.AllRows, cols, where, args...)
}

// daysOf is days with the rows fixed by a caller's move treated as m says.
func (r Reader) daysOf(ctx context.Context, t, cluster string, w Window, m rollup.Migrated, cols []string, where string, args ...any) (string, []any, error) {
	from, to := rollup.Span(w.From, w.To)
	src, all, err := rollup.Days(ctx, r.DB, rollup.TablesFor(t), rollup.Filter{Cluster: cluster, From: from, To: to, Where: where, Args: args,
		Columns: cols, Migrated: m})
	if err != nil {
		return "", nil, fmt.Errorf("read the days of %s: %w", cluster, err)
	}
	return src, all, nil
}

// Snapshot returns ctx under which the reads of one page share one snapshot of the rollup
// (package rollup's Snapshot): the retention, the read plans and the moved callers are read
// once, and every read takes the same builds.
func Snapshot(ctx context.Context) context.Context { return rollup.Snapshot(ctx) }

// Reads lets the pages read at the same time share their reads of the store (package
// rollup's Reads): users of two kinds asking at once read the clusters both may see once.
type Reads = rollup.Reads

// Shared returns ctx under which the console's reads are shared through s for a request that
// arrived at arrived (rollup.Shared).
func Shared(ctx context.Context, s *Reads, arrived time.Time) context.Context {
	return rollup.Shared(ctx, s, arrived)
}

// NewestBlocker is the time of cluster's newest finding that blocks target (zero: none): the
// index asks it for a cluster judged against its own target (the release after its own),
// which ClusterList, judging every cluster against one target, cannot tell.
func (r Reader) NewestBlocker(ctx context.Context, cluster string, target kubeversion.Version) (time.Time, error) {
	t, err := r.table()
	if err != nil {
		return time.Time{}, err
	}
	if cluster == "" || target.IsZero() {
		return time.Time{}, invalid("cluster and target version are required")
	}
	last, err := rollup.NewestBlocker(ctx, r.DB, rollup.TablesFor(t), cluster, target.Key())
	if err != nil || last == 0 {
		return time.Time{}, err
	}
	return unix(last), nil
}
