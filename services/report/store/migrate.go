package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// MigrateOptions tunes Migrate.
type MigrateOptions struct {
	// RetentionDays is how long raw findings are kept (TTL on event_time), on servers that
	// support TTL; 0 keeps them forever. Rollups and weekly_reports are kept forever.
	RetentionDays int
}

// Migrate brings the schema up to date: it applies the steps of Migrations not yet recorded in
// schema_migrations, then sets the retention where the server supports TTL. It returns the
// versions it applied. Running it again changes nothing.
//
// On a cluster every step is distributed DDL, which waits for every server of the cluster
// (distributed_ddl_task_timeout, 180 s by default); once the schema is complete, Migrate
// runs none, so a service starts while a replica is down.
func (s *Store) Migrate(ctx context.Context, o MigrateOptions) ([]int, error) {
	if o.RetentionDays < 0 {
		return nil, fmt.Errorf("retention of %d days: want 0 (forever) or more", o.RetentionDays)
	}
	if s.cluster != "" && s.complete(ctx) {
		ver, err := s.Version(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		return nil, s.setRetention(ctx, ver, o.RetentionDays)
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
		stmts, err := m.render(vars)
		if err != nil {
			return did, fmt.Errorf("migrate %d (%s): %w", m.Version, m.Name, err)
		}
		for _, q := range stmts {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return did, fmt.Errorf("migrate %d (%s): %w\n%s", m.Version, m.Name, err, strings.TrimSpace(q))
			}
		}
		row := []any{uint32(m.Version), m.Name, time.Now().UTC()}
		if err := s.Insert(ctx, "schema_migrations", []string{"version", "name", "applied_at"}, [][]any{row}); err != nil {
			return did, fmt.Errorf("migrate %d (%s): record: %w", m.Version, m.Name, err)
		}
		did = append(did, m.Version)
	}
	if err := s.setRetention(ctx, ver, o.RetentionDays); err != nil {
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

// setRetention applies the retention TTL to the tables the Migrations retain (the raw
// findings and their requests index) when the server supports it and it differs from the
// current one (MODIFY TTL rewrites parts, so it is not repeated at every start).
func (s *Store) setRetention(ctx context.Context, ver Version, days int) error {
	if !ver.Modern() {
		return nil
	}
	for _, m := range Migrations {
		for _, name := range m.Retained {
			cur, err := s.retentionOf(ctx, name)
			if err != nil {
				return err
			}
			if cur == days {
				continue
			}
			// On a cluster the TTL belongs to the shards' tables; ALTER ... ON CLUSTER reaches one
			// replica of each and replication carries it to the others.
			table := s.Table(localName(name, s.cluster)) + onCluster(s.cluster)
			q := fmt.Sprintf("ALTER TABLE %s MODIFY TTL event_time + toIntervalDay(%d)", table, days)
			if days == 0 {
				q = "ALTER TABLE " + table + " REMOVE TTL"
			}
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("set retention of %s to %d days: %w", name, days, err)
			}
		}
	}
	return nil
}

// Retention returns the TTL of raw findings in days, 0 when they are kept forever.
func (s *Store) Retention(ctx context.Context) (int, error) { return s.retentionOf(ctx, "findings") }

// retentionOf returns the TTL of table in days, 0 when its rows are kept forever.
func (s *Store) retentionOf(ctx context.Context, table string) (int, error) {
	var engine string
	err := s.db.QueryRowContext(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", s.database, localName(table, s.cluster)).Scan(&engine)
	if err != nil {
		return 0, fmt.Errorf("read the %s table definition: %w", table, err)
	}
	const marker = "toIntervalDay("
	i := strings.Index(engine, marker)
	if i < 0 {
		return 0, nil
	}
	var days int
	if _, err := fmt.Sscanf(engine[i+len(marker):], "%d", &days); err != nil {
		return 0, fmt.Errorf("read the %s TTL from %q: %w", table, engine, err)
	}
	return days, nil
}
