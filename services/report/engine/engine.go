// Package engine opens the auditlens store on the engine the flags choose: a ClickHouse
// server when --clickhouse-dsn is set, else embedded ClickHouse (chDB) in --clickhouse-data-dir.
package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/secret"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/store"
)

// Config selects and tunes the engine.
type Config struct {
	// DSN of a ClickHouse server (native protocol); empty means embedded chDB.
	DSN string
	// DataDir keeps the embedded engine's data.
	DataDir string
	// RetentionDays of raw findings and of every table that names a caller (store.Tables);
	// 0 keeps them forever.
	RetentionDays int
	// CountsRetentionDays of the tables of counts without callers; 0 keeps them forever.
	CountsRetentionDays int
	// Cluster names the ClickHouse cluster (remote_servers) the schema spans: replicated
	// tables per shard under Distributed tables (store.OpenCluster). Empty: one server.
	Cluster string
}

// DefaultRetentionDays is how long raw findings are kept by default.
const DefaultRetentionDays = 400

// DefaultConfig is embedded chDB in dataRoot/chdb, keeping findings and callers
// DefaultRetentionDays and counts forever.
func DefaultConfig(dataRoot string) Config {
	return Config{DataDir: filepath.Join(dataRoot, "chdb"), RetentionDays: DefaultRetentionDays}
}

// RegisterFlags adds --clickhouse-dsn, --clickhouse-data-dir, --retention-days,
// --counts-retention-days and --clickhouse-cluster to fs, each
// defaulting to the current value of its field, and the deprecated --data-dir (the name of
// --clickhouse-data-dir before) unless fs already has a --data-dir of its own.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DSN, "clickhouse-dsn", c.DSN, "ClickHouse server `dsn`, native protocol, e.g. clickhouse://user:pass@HOST:9000/auditlens (empty: embedded ClickHouse in --clickhouse-data-dir)")
	fs.StringVar(&c.DataDir, "clickhouse-data-dir", c.DataDir, "`directory` of the embedded ClickHouse when no --clickhouse-dsn")
	fs.IntVar(&c.RetentionDays, "retention-days", c.RetentionDays, "keep findings and everything that names a caller (user, service account, user agent, source IP: the rollups, the requests index, the migration sightings) this many `days`, whole UTC days, then delete them (0: forever); set by the report service, read by every command")
	fs.IntVar(&c.CountsRetentionDays, "counts-retention-days", c.CountsRetentionDays, "keep the counts that name no caller (trend lines by rule and API, the minutes that carried events, control-plane and coverage sightings) this many `days` (0: forever)")
	fs.StringVar(&c.Cluster, "clickhouse-cluster", c.Cluster, "ClickHouse cluster `name` (remote_servers, with shard/replica macros and ZooKeeper) to create the schema ON CLUSTER: replicated tables per shard, Distributed tables to write and read (empty: one server)")
	flagenv.Deprecated(fs, "data-dir", "clickhouse-data-dir")
}

// Validate checks c; it changes nothing.
func (c Config) Validate() error {
	if c.DSN != "" && !strings.HasPrefix(c.DSN, "clickhouse://") && !strings.HasPrefix(c.DSN, "tcp://") {
		return fmt.Errorf("--clickhouse-dsn %q: want clickhouse://HOST:9000/DATABASE (the native protocol)", secret.URL(c.DSN))
	}
	if c.DSN == "" && c.DataDir == "" {
		return errors.New("--clickhouse-data-dir is empty: give a directory for the embedded ClickHouse, or --clickhouse-dsn")
	}
	if c.Cluster != "" {
		if c.DSN == "" {
			return fmt.Errorf("--clickhouse-cluster %q needs --clickhouse-dsn: the embedded ClickHouse is one server", c.Cluster)
		}
		if !clusterRE.MatchString(c.Cluster) {
			return fmt.Errorf("--clickhouse-cluster %q: want the cluster's name in remote_servers (letters, digits, '_')", c.Cluster)
		}
	}
	if c.RetentionDays < 0 {
		return fmt.Errorf("--retention-days %d: want 0 (forever) or more", c.RetentionDays)
	}
	if c.CountsRetentionDays < 0 {
		return fmt.Errorf("--counts-retention-days %d: want 0 (forever) or more", c.CountsRetentionDays)
	}
	return nil
}

var clusterRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Embedded reports whether the embedded engine is chosen.
func (c *Config) Embedded() bool { return c.DSN == "" }

// Open opens the store; a server is not contacted until first use.
func (c *Config) Open(ctx context.Context) (*store.Store, error) {
	if c.Cluster != "" {
		return store.OpenCluster(c.DSN, c.Cluster)
	}
	return Open(ctx, c.DSN, c.DataDir)
}

// Open opens the store on the server at dsn, or, with dsn empty, on embedded chDB in dataDir
// (database auditlens).
func Open(ctx context.Context, dsn, dataDir string) (*store.Store, error) {
	if dsn != "" {
		return store.OpenServer(dsn)
	}
	st, err := chdb.Open(ctx, dataDir, store.DefaultDatabase)
	if err != nil {
		return nil, fmt.Errorf("embedded clickhouse in %s: %w", dataDir, err)
	}
	return st, nil
}

// Describe names the engine for logs without credentials.
func (c *Config) Describe() string {
	if c.DSN == "" {
		return "embedded chdb in " + c.DataDir
	}
	if c.Cluster != "" {
		return secret.URL(c.DSN) + " (cluster " + c.Cluster + ")"
	}
	return secret.URL(c.DSN)
}
