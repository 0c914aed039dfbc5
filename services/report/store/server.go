package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	chdriver "github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// OpenServer connects to a ClickHouse server over the native protocol, e.g.
// "clickhouse://user:pass@host:9000/auditlens?dial_timeout=5s" (see clickhouse-go's DSN).
// Nothing is dialled yet; Migrate creates the database (default auditlens) and the tables.
func OpenServer(dsn string) (*Store, error) {
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("clickhouse dsn: %w", err)
	}
	if opts.Protocol != clickhouse.Native {
		return nil, fmt.Errorf("clickhouse dsn: use the native protocol (clickhouse://host:9000/db); HTTP does not work with every server")
	}
	database := opts.Auth.Database
	if database == "" {
		database = DefaultDatabase
	}
	if err := ValidateIdent(database); err != nil {
		return nil, fmt.Errorf("clickhouse dsn: database: %w", err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 5 * time.Second
	}
	// Create the database through a connection to "default": a session cannot start in a
	// database that does not exist yet.
	boot := *opts
	boot.Auth.Database = "default"
	boot.MaxOpenConns = 1
	createDB := func(ctx context.Context) error {
		bconn, err := clickhouse.Open(&boot)
		if err != nil {
			return fmt.Errorf("connect to clickhouse %s: %w", strings.Join(opts.Addr, ","), err)
		}
		defer bconn.Close()
		if err := bconn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+database); err != nil {
			return fmt.Errorf("clickhouse %s: create database %s: %w", strings.Join(opts.Addr, ","), database, err)
		}
		return nil
	}
	opts.Auth.Database = database
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to clickhouse: %w", err)
	}
	db := clickhouse.OpenDB(opts)
	s, err := New(db, &serverBackend{conn: conn}, database, createDB)
	if err != nil {
		_ = db.Close()
		_ = conn.Close()
		return nil, err
	}
	return s, nil
}

// serverBackend writes with clickhouse-go native batches.
type serverBackend struct{ conn chdriver.Conn }

func (b *serverBackend) Insert(ctx context.Context, table string, columns []string, rows [][]any) error {
	batch, err := b.conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+strings.Join(columns, ", ")+")")
	if err != nil {
		return err
	}
	defer func() { _ = batch.Close() }()
	for _, r := range rows {
		if err := batch.Append(r...); err != nil {
			_ = batch.Abort()
			return err
		}
	}
	return batch.Send()
}

func (b *serverBackend) InsertColumns(ctx context.Context, table string, columns []string, data []any) error {
	if len(columns) != len(data) {
		return fmt.Errorf("%d columns, %d column slices", len(columns), len(data))
	}
	batch, err := b.conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+strings.Join(columns, ", ")+")")
	if err != nil {
		return err
	}
	defer func() { _ = batch.Close() }()
	for i, col := range data {
		if err := batch.Column(i).Append(col); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("column %s: %w", columns[i], err)
		}
	}
	return batch.Send()
}

func (b *serverBackend) Close() error { return b.conn.Close() }
