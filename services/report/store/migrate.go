package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// MigrateOptions tunes Migrate.
type MigrateOptions struct {
	// RetentionDays is how long raw findings and every table naming a caller are kept (see
	// Tables); 0 keeps them forever.
	RetentionDays int
	// CountsRetentionDays is how long the tables of counts without callers are kept; 0 keeps
	// them forever.
	CountsRetentionDays int
}

func (o MigrateOptions) retention() Retention {
	return Retention{Callers: o.RetentionDays, Counts: o.CountsRetentionDays}
}

// Migrate brings the schema up to date: it applies the steps of Migrations not yet recorded in
// schema_migrations, then records the retention and sets it as TTL where the server has TTL
// (Expire applies it where it has not). It returns the
// versions it applied. Running it again changes nothing.
//
// On a cluster every step is distributed DDL, which waits for every server of the cluster
// (distributed_ddl_task_timeout, 180 s by default); once the schema is complete, Migrate
// runs none, so a service starts while a replica is down.
func (s *Store) Migrate(ctx context.Context, o MigrateOptions) ([]int, error) {
	if err := o.retention().Validate(); err != nil {
		return nil, err
	}
	if s.cluster != "" && s.complete(ctx) {
		ver, err := s.Version(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		return nil, s.setRetention(ctx, ver, o.retention())
	}
	if s.createDB != nil {
		if err := s.createDB(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	ver, err := s.Version(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	vars := varsFor(s.database, ver, s.cluster)
	if err := s.createMigrations(ctx, vars); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	applied, err := s.AppliedMigrations(ctx)
	if err != nil {
		return nil, err
	}
	var did []int
	for _, m := range Migrations {
		if applied[m.Version] {
			continue
		}
		if err := s.apply(ctx, m, vars); err != nil {
			return did, err
		}
		row := []any{uint32(m.Version), m.Name, time.Now().UTC()}
		if err := s.Insert(ctx, "schema_migrations", []string{"version", "name", "applied_at"}, [][]any{row}); err != nil {
			return did, fmt.Errorf("migrate %d (%s): record: %w", m.Version, m.Name, err)
		}
		did = append(did, m.Version)
	}
	if err := s.setRetention(ctx, ver, o.retention()); err != nil {
		return did, err
	}
	return did, nil
}

// migrationsTable records the applied migrations; on a cluster it is replicated to every
// server, and Migrate reads it on the server it recorded to.
var migrationsTable = Migration{Version: 0, Name: "schema_migrations", SQL: []string{`
CREATE TABLE IF NOT EXISTS {{.DB}}.schema_migrations{{.On}} (
    version    UInt32,
    name       String,
    applied_at DateTime('UTC')
) ENGINE = {{.EngineEverywhere "schema_migrations" "ReplacingMergeTree(applied_at)"}} ORDER BY version`}}

func (s *Store) createMigrations(ctx context.Context, vars schemaVars) error {
	stmts, err := migrationsTable.render(vars)
	if err != nil {
		return err
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// complete reports whether every migration is recorded (false when that cannot be read,
// e.g. before the database exists).
func (s *Store) complete(ctx context.Context) bool {
	applied, err := s.AppliedMigrations(ctx)
	if err != nil {
		return false
	}
	for _, m := range Migrations {
		if !applied[m.Version] {
			return false
		}
	}
	return true
}

// AppliedMigrations returns the versions recorded in schema_migrations.
func (s *Store) AppliedMigrations(ctx context.Context) (map[int]bool, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT DISTINCT version FROM "+s.Table("schema_migrations"))
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	defer rows.Close()
	out := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", err)
		}
		out[int(v)] = true
	}
	return out, rows.Err()
}

// apply runs the statements of m.
func (s *Store) apply(ctx context.Context, m Migration, vars schemaVars) error {
	stmts, err := m.render(vars)
	if err != nil {
		return fmt.Errorf("migrate %d (%s): %w", m.Version, m.Name, err)
	}
	for _, q := range stmts {
		if _, err := s.db.ExecContext(ctx, q); err != nil && !addedBefore(q, err) {
			return fmt.Errorf("migrate %d (%s): %w\n%s", m.Version, m.Name, err, strings.TrimSpace(q))
		}
	}
	return nil
}

// addedBefore reports whether err says that the column the statement q adds (ALTER TABLE ...
// ADD COLUMN, one column) is there already: a step repeated after it was interrupted, or run by
// two replicas at once. ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS.
func addedBefore(q string, err error) bool {
	return strings.Count(q, " ADD COLUMN ") == 1 && strings.Contains(err.Error(), "already exists")
}
