package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	chdriver "github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// OpenServer connects to a ClickHouse server over the native protocol, e.g.
// "clickhouse://user:pass@host:9000/auditlens?dial_timeout=5s" (see clickhouse-go's DSN).
// Nothing is dialled yet; Migrate creates the database (default auditlens) and the tables.
func OpenServer(dsn string) (*Store, error) { return openServer(dsn, "") }

// OpenCluster connects to the servers of a ClickHouse cluster (a <remote_servers> entry
// named cluster on each of them, with <macros> shard and replica, ZooKeeper and
// <distributed_ddl>), e.g. "clickhouse://h1:9000,h2:9000/auditlens" (the client fails over
// between the hosts listed). Migrate then creates every table ON CLUSTER: a Replicated table
// per shard (findings_local, ...) and a Distributed table of the name users query
// (findings, ...) over it. Writes go through the Distributed tables synchronously
// (insert_distributed_sync): a write that returns is on one replica of each shard it
// touched, and a block written again after a failure is not stored twice (replicated
// block de-duplication). Reads through them cover every shard.
func OpenCluster(dsn, cluster string) (*Store, error) {
	if err := ValidateIdent(cluster); err != nil || strings.Contains(cluster, ".") {
		return nil, fmt.Errorf("clickhouse cluster %q: want a plain name (letters, digits, '_') as in remote_servers", cluster)
	}
	return openServer(dsn, cluster)
}

func openServer(dsn, cluster string) (*Store, error) {
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
		if err := bconn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+database+onCluster(cluster)); err != nil {
			return fmt.Errorf("clickhouse %s: create database %s: %w", strings.Join(opts.Addr, ","), database, err)
		}
		return nil
	}
	opts.Auth.Database = database
	if cluster != "" {
		// An insert into a Distributed table returns once every shard's part of it is
		// written (not queued on the server that took it), so acknowledging after it is safe.
		// Copy the settings: boot shares the map.
		settings := clickhouse.Settings{"insert_distributed_sync": 1}
		for k, v := range opts.Settings {
			settings[k] = v
		}
		opts.Settings = settings
	}
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
	s.cluster = cluster
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

func (b *serverBackend) insertBlock(ctx context.Context, table string, blk *Block, ingested time.Time) error {
	batch, err := b.conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+strings.Join(FindingColumns, ", ")+")")
	if err != nil {
		return err
	}
	defer func() { _ = batch.Close() }()
	if err := blk.appendColumns(batch.Columns(), ingested); err != nil {
		_ = batch.Abort()
		return err
	}
	return batch.Send()
}

// findingStrCols maps the columns of FindingColumns to the block's string columns, -1 for
// the others.
var findingStrCols = [...]int{colRule, -1, colCluster, colAudit, -1, colVerb, colURI, colGroup,
	colVersion, colResource, colSub, colNamespace, colName, colUser, colAgent, colIP, -1,
	colDeprecated, colRemoved, -1, colReplacement, colMessage, colStage, colNode, -1, -1, -1, -1, -1}

// appendColumns fills clickhouse-go's columns of an INSERT INTO findings (FindingColumns,
// in order). Strings go in as *[]byte, the one way that neither boxes nor copies them into
// a string first.
func (b *Block) appendColumns(cols []column.Interface, ingested time.Time) error {
	if len(cols) != len(FindingColumns) {
		return fmt.Errorf("insert block: %d columns, want %d", len(cols), len(FindingColumns))
	}
	for i, c := range cols {
		if c.Name() != FindingColumns[i] {
			return fmt.Errorf("insert block: column %d is %s, want %s", i, c.Name(), FindingColumns[i])
		}
	}
	var v []byte
	pv := &v
	appendStrings := func(c column.Interface, sc *strCol) error {
		start := 0
		for _, end := range sc.end {
			v = sc.buf[start:end:end]
			if err := c.AppendRow(pv); err != nil {
				return err
			}
			start = end
		}
		return nil
	}
	var name string
	pn := &name
	appendEnum := func(c column.Interface, vals []int32, names func(int32) string) error {
		for _, x := range vals {
			name = names(x)
			if err := c.AppendRow(pn); err != nil {
				return err
			}
		}
		return nil
	}
	times := make([]int64, b.n)
	ingestedAt := make([]int64, b.n)
	for i, t := range b.times {
		if t == noTime {
			t = ingested.Unix()
		}
		times[i], ingestedAt[i] = t, ingested.Unix()
	}
	// Evidence: one row of *[]byte per finding, pointing into scratch.
	var scratch [][]byte
	var ptrs []*[]byte
	appendEvidence := func(c column.Interface, sc *strCol) error {
		start := 0
		for i := range b.n {
			end := b.evEnd[i]
			for len(scratch) < end-start {
				scratch = append(scratch, nil)
				ptrs = append(ptrs, nil)
				for j := range ptrs {
					ptrs[j] = &scratch[j]
				}
			}
			for j := start; j < end; j++ {
				scratch[j-start] = sc.value(j)
			}
			if err := c.AppendRow(ptrs[:end-start]); err != nil {
				return err
			}
			start = end
		}
		return nil
	}
	for i, c := range cols {
		var err error
		switch name := FindingColumns[i]; {
		case findingStrCols[i] >= 0:
			err = appendStrings(c, &b.str[findingStrCols[i]])
		case name == "severity":
			err = appendEnum(c, b.sev, severityName)
		case name == "confidence":
			err = appendEnum(c, b.conf, confidenceName)
		case name == "event_time":
			_, err = c.Append(times)
		case name == "ingested_at":
			_, err = c.Append(ingestedAt)
		case name == "response_code":
			_, err = c.Append(b.codes)
		case name == "removed_in_key":
			_, err = c.Append(b.keys)
		case name == "request_received":
			_, err = c.Append(b.received)
		case name == "evidence_path":
			err = appendEvidence(c, &b.evPath)
		case name == "evidence_value":
			err = appendEvidence(c, &b.evValue)
		default:
			err = fmt.Errorf("no values for column %s", name)
		}
		if err != nil {
			return fmt.Errorf("column %s: %w", FindingColumns[i], err)
		}
	}
	return nil
}

func (b *serverBackend) Close() error { return b.conn.Close() }

// WithDeadline returns ctx ending after d, carrying ClickHouse's max_execution_time of d
// (whole seconds, at least one) for the queries run with it on a server; embedded chDB
// cancels its running query when ctx ends. A query past d fails on both engines.
func WithDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	secs := max(1, int((d+time.Second-1)/time.Second))
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_execution_time": secs}))
	return context.WithTimeout(ctx, d)
}
