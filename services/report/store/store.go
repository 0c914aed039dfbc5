// Package store keeps auditlens findings in ClickHouse: the versioned schema (database
// auditlens, raw table findings, daily rollups, weekly_reports, the minutes that carried
// events from classify's heartbeats), batched writes, and one
// database/sql handle that runs the same SQL on a ClickHouse server (18.16 or current,
// native protocol through clickhouse-go) and on embedded chDB (package chdb).
//
// # Counting exactly once
//
// Delivery is at-least-once, so the same finding, identified by (cluster, audit_id, rule_id,
// request_received), may be inserted several times. request_received is the second its
// request was received: a client may send its own Audit-ID, which the kube-apiserver keeps,
// so one audit ID may name several requests (0 for a sighting, one finding per caller and
// day, and for the findings stored before migration 20). The raw table is a
// ReplacingMergeTree ordered by exactly that identity, so duplicates collapse when parts
// merge, but until then they are separate rows. Every query that counts findings must
// therefore count the identity, never rows:
//
//	uniqExact(cluster, rule_id, audit_id, request_received)
//
// (FINAL also works but reads slower). The day rows of package rollup hold uniqExact states
// of the identity per cluster, day, rule, API and caller, so a re-inserted finding adds nothing:
// read them through rollup.Days, or outside Go through the view finding_days_current (sum
// its findings).
//
// # On a cluster
//
// With OpenCluster every table is created ON CLUSTER: findings and the rollups as
// Replicated tables per shard (findings_local, finding_hour_states_local, ...) under Distributed
// tables of the names above, findings sharded by cityHash64(cluster, audit_id) so that
// every copy of one identity lands on one shard; schema_migrations and weekly_reports are
// small tables replicated to every server. Inserts go through the Distributed tables
// synchronously; a retried block (same rows, same ingested time: WriteBlockAt) is stored
// once by replicated de-duplication. The rollup views read the Distributed findings
// table, so every attempt of an insert reaches them. Queries stay the same; replication
// is asynchronous, so a read right after a write may miss it on a replica that is behind.
//
// # One schema, two generations of ClickHouse
//
// The schema is written for ClickHouse 18.16 and adds, on servers from 20.3 on,
// LowCardinality(String) for low-cardinality columns and the retention as TTL (on 18.16,
// Expire deletes what lies past it; see Tables).
// Queries must stick to what 18.16 understands (see DESIGN.md): no WITH subqueries, window
// functions, JSON functions, toStartOfInterval; toMonday instead of toStartOfWeek; only
// positional ? arguments, which both drivers bind client-side as escaped literals.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// DefaultDatabase is the database of a DSN that names none.
const DefaultDatabase = "auditlens"

// Backend writes blocks of rows into one engine. Tables are qualified with the database.
type Backend interface {
	// Insert writes rows (one value per column, in columns order) into table as one block.
	Insert(ctx context.Context, table string, columns []string, rows [][]any) error
	// Close releases the backend's connections. It is idempotent.
	Close() error
}

// Store is an open auditlens database. Opening one does not contact the engine: a server
// that is down makes queries and inserts fail until it is back, and Migrate (which also
// creates the database) is the first thing to retry.
type Store struct {
	db       *sql.DB
	be       Backend
	database string
	// createDB creates the database on engines where the default connection cannot.
	createDB func(ctx context.Context) error
	// cluster is the ClickHouse cluster the schema spans (see OpenCluster); empty on a
	// single server and on chDB.
	cluster string

	mu      sync.Mutex
	version Version
}

// New makes a Store over an engine: db runs queries with database as the default database,
// be writes rows, createDB (may be nil) creates the database before migrations.
func New(db *sql.DB, be Backend, database string, createDB func(ctx context.Context) error) (*Store, error) {
	if err := ValidateIdent(database); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return &Store{db: db, be: be, database: database, createDB: createDB}, nil
}

// Version asks the engine for its ClickHouse version (once).
func (s *Store) Version(ctx context.Context) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version != (Version{}) {
		return s.version, nil
	}
	var v string
	if err := s.db.QueryRowContext(ctx, "SELECT version()").Scan(&v); err != nil {
		return Version{}, fmt.Errorf("ask clickhouse for its version: %w", err)
	}
	ver, err := ParseVersion(v)
	if err != nil {
		return Version{}, err
	}
	s.version = ver
	return ver, nil
}

// DB is a database/sql handle whose default database is the store's: use unqualified table
// names and positional ? arguments; it behaves the same on both engines.
func (s *Store) DB() *sql.DB { return s.db }

// Cluster is the ClickHouse cluster the store's schema spans, empty on a single server.
func (s *Store) Cluster() string { return s.cluster }

// Database is the name of the auditlens database.
func (s *Store) Database() string { return s.database }

// Table qualifies name with the store's database.
func (s *Store) Table(name string) string { return s.database + "." + name }

// DropMonth drops the partition of month (YYYYMM) of table (as Table gives it, or
// unqualified), a table partitioned by toYYYYMM: on a cluster from the local table of every
// shard and replica (distributed DDL, which waits for every server). A month without rows
// drops nothing.
func (s *Store) DropMonth(ctx context.Context, table string, month uint32) error {
	if month < 197001 || month > 210612 || month%100 < 1 || month%100 > 12 {
		return fmt.Errorf("drop month %d of %s: not a month", month, table)
	}
	// Another database's table keeps its dot, which no identifier has.
	name := strings.TrimPrefix(table, s.database+".")
	if ValidateIdent(name) != nil {
		return fmt.Errorf("drop month %d of %s: not a table of database %s", month, table, s.database)
	}
	q := fmt.Sprintf("ALTER TABLE %s%s DROP PARTITION %d", s.Table(localName(name, s.cluster)), onCluster(s.cluster), month)
	if _, err := s.db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("drop month %d of %s: %w", month, table, err)
	}
	return nil
}

// Insert writes rows into table (unqualified) in one block, naming the columns.
func (s *Store) Insert(ctx context.Context, table string, columns []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	if err := ValidateIdent(table); err != nil {
		return fmt.Errorf("insert: table: %w", err)
	}
	for _, c := range columns {
		if err := ValidateIdent(c); err != nil {
			return fmt.Errorf("insert into %s: column: %w", table, err)
		}
	}
	if err := s.be.Insert(ctx, s.Table(table), columns, rows); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", len(rows), table, err)
	}
	return nil
}

// Ping checks that the engine answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Close releases the store. It is idempotent.
func (s *Store) Close() error {
	return errors.Join(s.db.Close(), s.be.Close())
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,127}$`)

// ValidateIdent accepts plain ClickHouse identifiers (letters, digits, '_', and '.' for
// nested columns), the only ones auditlens puts into SQL text.
func ValidateIdent(name string) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%q is not a plain identifier (letters, digits, '_')", name)
	}
	return nil
}

// Version is a ClickHouse release.
type Version struct{ Major, Minor int }

// ParseVersion reads the output of version(), e.g. "18.16.1" or "26.7.2.1".
func ParseVersion(s string) (Version, error) {
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("clickhouse version %q: want MAJOR.MINOR", s)
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return Version{}, fmt.Errorf("clickhouse version %q: want MAJOR.MINOR", s)
	}
	return Version{maj, min}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// Modern reports whether the server has what the schema uses when available:
// non-experimental LowCardinality and TTL (both settled by 20.3).
func (v Version) Modern() bool { return v.AtLeast(20, 3) }
