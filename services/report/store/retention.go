package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// retentionMigration is the step that creates retention_settings.
const retentionMigration = 12

// Holds says what a table's rows hold, and so which retention they follow.
type Holds int

const (
	// Callers: rows that name who did something or what they touched (user names, service
	// accounts, user agents, source IPs, namespaces, object names, audit ids). Personal data:
	// kept --retention-days, like the raw findings they come from.
	Callers Holds = iota + 1
	// Counts: numbers by cluster, time, rule, API, component or input, naming no caller (the
	// trend lines, the minutes that carried events). Kept --counts-retention-days.
	Counts
	// Ledger: the store's own records (the schema's versions, the weekly reports sent and to
	// whom, the retention itself). Never expired.
	Ledger
)

func (h Holds) String() string {
	switch h {
	case Callers:
		return "callers"
	case Counts:
		return "counts"
	case Ledger:
		return "ledger"
	}
	return fmt.Sprintf("Holds(%d)", int(h))
}

// RetainedTable is a table of the schema and what the retention does with its rows.
type RetainedTable struct {
	Name  string
	Holds Holds
	// Time is the column a row's age is read from: a DateTime('UTC'), or a Date when Date is
	// set. The rows of a UTC day expire together, when the day lies the retention's days or
	// more in the past (see KeptFrom). Empty for Ledger tables.
	Time string
	Date bool
}

// Day is the SQL expression of the UTC day a row belongs to, as a Date.
func (t RetainedTable) Day() string {
	if t.Date {
		return t.Time
	}
	return "toDate(" + t.Time + ")"
}

// ttl is the TTL expression that expires a row of t after days: the start of its UTC day
// plus days. ClickHouse prints it back in this form (ttlOf reads it to compare).
func (t RetainedTable) ttl(days int) string {
	start := "toStartOfDay(" + t.Time + ")"
	if t.Date {
		start = "toDateTime(" + t.Time + ", 'UTC')"
	}
	return fmt.Sprintf("%s + toIntervalDay(%d)", start, days)
}

// Tables is every table of the schema (Migrations and schema_migrations) with what it holds.
// A table added to the schema must be added here: TestEveryTableHasARetention fails
// otherwise, and fails a Counts or Ledger table that has a column naming callers.
var Tables = []RetainedTable{
	{Name: "findings", Holds: Callers, Time: "event_time"},
	{Name: "finding_requests", Holds: Callers, Time: "event_time"},
	{Name: "finding_rows", Holds: Callers, Time: "day", Date: true},
	{Name: "finding_hour_states", Holds: Callers, Time: "hour"},
	{Name: "caller_names", Holds: Callers, Time: "seen", Date: true},
	{Name: "migration_sightings", Holds: Callers, Time: "seen"},
	// The rollup's records of its builds and changes name no caller, but go with the rows
	// they describe: a build recorded without its rows would read as a day without findings.
	{Name: "finding_builds", Holds: Callers, Time: "day", Date: true},
	{Name: "finding_hour_changes", Holds: Callers, Time: "hour"},
	{Name: "blocker_names", Holds: Callers, Time: "seen", Date: true},

	{Name: "stream_minutes", Holds: Counts, Time: "minute"},
	{Name: "event_minutes", Holds: Counts, Time: "minute"},
	{Name: "control_plane_sightings", Holds: Counts, Time: "seen"},
	{Name: "coverage_sightings", Holds: Counts, Time: "seen"},
	{Name: "review_sightings", Holds: Counts, Time: "seen"},

	{Name: "schema_migrations", Holds: Ledger},
	{Name: "weekly_reports", Holds: Ledger},
	{Name: "retention_settings", Holds: Ledger},
	{Name: "leases", Holds: Ledger},
}

// Retention is how long the store keeps rows, in days; 0 keeps them forever.
type Retention struct {
	// Callers is --retention-days: the raw findings and every table that names a caller.
	Callers int
	// Counts is --counts-retention-days: the tables of counts without callers.
	Counts int
}

// Days is the retention of the tables that hold h (0 for Ledger: forever).
func (r Retention) Days(h Holds) int {
	switch h {
	case Callers:
		return r.Callers
	case Counts:
		return r.Counts
	}
	return 0
}

// Validate checks r.
func (r Retention) Validate() error {
	if r.Callers < 0 {
		return fmt.Errorf("retention of %d days: want 0 (forever) or more", r.Callers)
	}
	if r.Counts < 0 {
		return fmt.Errorf("retention of counts of %d days: want 0 (forever) or more", r.Counts)
	}
	return nil
}

// KeptFrom is the first UTC day whose rows a retention of days keeps at now: a row of day D
// is kept while D + days is after today, so a retention of 1 keeps today only. The zero time
// for days 0 (everything is kept).
func KeptFrom(now time.Time, days int) time.Time {
	if days <= 0 {
		return time.Time{}
	}
	return now.UTC().Truncate(24*time.Hour).AddDate(0, 0, 1-days)
}

// Retention returns the retention Migrate last set (the zero Retention before any: kept
// forever). Every process reads it here, whatever its own flags say.
func (s *Store) Retention(ctx context.Context) (Retention, error) {
	var r Retention
	rows, err := s.db.QueryContext(ctx, "SELECT kind, argMax(days, version) FROM "+s.Table("retention_settings")+" GROUP BY kind")
	if err != nil {
		return r, fmt.Errorf("read the retention: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind string
		var days uint32
		if err := rows.Scan(&kind, &days); err != nil {
			return r, fmt.Errorf("read the retention: %w", err)
		}
		switch kind {
		case Callers.String():
			r.Callers = int(days)
		case Counts.String():
			r.Counts = int(days)
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read the retention: %w", err)
	}
	return r, nil
}

// setRetention records r in retention_settings when it differs from the one recorded, and
// sets each retained table's TTL to it where the server has TTL (MODIFY TTL rewrites parts,
// so it runs only for a table whose TTL differs).
func (s *Store) setRetention(ctx context.Context, ver Version, r Retention) error {
	if !slices.ContainsFunc(Migrations, func(m Migration) bool { return m.Version == retentionMigration }) {
		return nil // a schema cut short (tests of earlier steps) has neither the record nor the tables
	}
	cur, err := s.Retention(ctx)
	if err != nil {
		return err
	}
	if cur != r {
		now := time.Now().UTC()
		rows := [][]any{{Callers.String(), uint32(r.Callers), now, uint64(now.UnixNano())}, {Counts.String(), uint32(r.Counts), now, uint64(now.UnixNano())}}
		if err := s.Insert(ctx, "retention_settings", []string{"kind", "days", "set_at", "version"}, rows); err != nil {
			return fmt.Errorf("record the retention: %w", err)
		}
	}
	if !ver.Modern() {
		return nil // no TTL: Expire deletes what is past the retention
	}
	for _, t := range Tables {
		if t.Holds == Ledger {
			continue
		}
		days := r.Days(t.Holds)
		want := ""
		if days > 0 {
			want = t.ttl(days)
		}
		have, err := s.ttlOf(ctx, t.Name)
		if errors.Is(err, sql.ErrNoRows) {
			continue // a schema cut short (tests of earlier steps) lacks the later tables
		}
		if err != nil {
			return err
		}
		if have == want {
			continue
		}
		// On a cluster the TTL belongs to the shards' tables; ALTER ... ON CLUSTER reaches one
		// replica of each and replication carries it to the others.
		table := s.Table(localName(t.Name, s.cluster)) + onCluster(s.cluster)
		q := "ALTER TABLE " + table + " MODIFY TTL " + want
		if want == "" {
			q = "ALTER TABLE " + table + " REMOVE TTL"
		}
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("set the retention of %s to %d days: %w", t.Name, days, err)
		}
	}
	return nil
}

// ttlOf returns the TTL expression of table, "" when it has none.
func (s *Store) ttlOf(ctx context.Context, table string) (string, error) {
	var engine string
	err := s.db.QueryRowContext(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", s.database, localName(table, s.cluster)).Scan(&engine)
	if err != nil {
		return "", fmt.Errorf("read the %s table definition: %w", table, err)
	}
	_, ttl, ok := strings.Cut(engine, " TTL ")
	if !ok {
		return "", nil
	}
	ttl, _, _ = strings.Cut(ttl, " SETTINGS ")
	return strings.TrimSpace(ttl), nil
}

// Expired is what Expire deleted: per table, the rows of days before the retention.
type Expired struct {
	Table string
	Rows  uint64
	// Before is the first day kept.
	Before time.Time
}

// Expire deletes the rows of every retained table that lie before its retention by the
// server's clock, and returns what it deleted. TTL does it on servers that have it, at the
// insert of expired rows and at merges (within hours); Expire is what does it on servers
// without TTL (18.16), and catches up with merges that have not run yet on the others. A table
// without such rows costs one count that reads only its oldest partitions. The deletion is a
// mutation, waited for.
func (s *Store) Expire(ctx context.Context) ([]Expired, error) {
	r, err := s.Retention(ctx)
	if err != nil {
		return nil, err
	}
	if r.Callers == 0 && r.Counts == 0 {
		return nil, nil
	}
	var now uint32
	if err := s.db.QueryRowContext(ctx, "SELECT toUInt32(now())").Scan(&now); err != nil {
		return nil, fmt.Errorf("expire: read the server's clock: %w", err)
	}
	var out []Expired
	for _, t := range Tables {
		days := r.Days(t.Holds)
		if days == 0 {
			continue
		}
		from := KeptFrom(time.Unix(int64(now), 0), days)
		where := t.Day() + " < toDate('" + from.Format(time.DateOnly) + "')"
		var n uint64
		if err := s.db.QueryRowContext(ctx, "SELECT count() FROM "+s.Table(t.Name)+" WHERE "+where).Scan(&n); err != nil {
			return out, fmt.Errorf("expire %s: %w", t.Name, err)
		}
		if n == 0 {
			continue
		}
		if err := s.deleteWhere(ctx, t.Name, where); err != nil {
			return out, fmt.Errorf("expire %d rows of %s before %s: %w", n, t.Name, from.Format(time.DateOnly), err)
		}
		out = append(out, Expired{Table: t.Name, Rows: n, Before: from})
	}
	return out, nil
}

// DeleteBuilds deletes the rows of table (a table of the rollup's builds, "name" or
// "database.name") whose build is one of ids, and waits until it is done (package rollup's
// Clean).
func (s *Store) DeleteBuilds(ctx context.Context, table string, ids []uint64) error {
	name := strings.TrimPrefix(table, s.database+".")
	if ValidateIdent(name) != nil {
		return fmt.Errorf("delete builds of %s: not a table of database %s", table, s.database)
	}
	if len(ids) == 0 {
		return nil
	}
	// The ids are numbers: written as literals.
	set := make([]string, len(ids))
	for i, id := range ids {
		set[i] = strconv.FormatUint(id, 10)
	}
	return s.deleteWhere(ctx, name, "build IN ("+strings.Join(set, ", ")+")")
}

// deleteWhere deletes the rows of table where cond holds, as a mutation of its local tables
// (on a cluster, of each shard, replicated to its replicas), and waits until it is done.
func (s *Store) deleteWhere(ctx context.Context, table, cond string) error {
	local := localName(table, s.cluster)
	q := "ALTER TABLE " + s.Table(local) + onCluster(s.cluster) + " DELETE WHERE " + cond
	if _, err := s.db.ExecContext(ctx, q); err != nil {
		return err
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		var pending uint64
		err := s.db.QueryRowContext(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0", s.database, local).Scan(&pending)
		if err != nil {
			return fmt.Errorf("wait for the deletion: %w", err)
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the deletion: %w", ctx.Err())
		case <-t.C:
		}
	}
}
