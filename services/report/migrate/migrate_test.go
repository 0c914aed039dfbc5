package migrate

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "applies the schema migrations"},
		{[]string{"--help"}, 0, "AUDITLENS_CLICKHOUSE_DATA_DIR"},
		{[]string{"--retention-days", "-1"}, 2, "--retention-days -1"},
		{[]string{"--clickhouse-dsn", "http://localhost:8123"}, 2, "native protocol"},
		{[]string{"--clickhouse-dsn", "", "--clickhouse-data-dir", ""}, 2, "--clickhouse-data-dir is empty"},
		// --data-dir, the name of --clickhouse-data-dir before, still works and says it is deprecated.
		{[]string{"--data-dir", ""}, 2, "--clickhouse-data-dir is empty"},
		{[]string{"--data-dir", ""}, 2, "flag --data-dir is deprecated: use --clickhouse-data-dir"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, 2, "no-such-flag"},
	} {
		var out bytes.Buffer
		if code := Main(c.args, &out); code != c.code || !strings.Contains(out.String(), c.out) {
			t.Errorf("report migrate %v: exit %d, want %d, output containing %q:\n%s", c.args, code, c.code, c.out, out.String())
		}
	}
}

func TestMigrate(t *testing.T) {
	srv := chtest.StartServer(t)
	for i := range 2 {
		var out bytes.Buffer
		if code := Main([]string{"--clickhouse-dsn", srv.DSN("auditlens")}, &out); code != 0 {
			t.Fatalf("migrate run %d: exit %d\n%s", i+1, code, out.String())
		}
		want := "applied " + allMigrations()
		if i == 1 {
			want = "applied []"
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("migrate run %d: %q, want %q", i+1, out.String(), want)
		}
	}
}

func TestMigrateEmbedded(t *testing.T) {
	dir := chtest.EmbeddedDir(t)
	var out bytes.Buffer
	if code := Main([]string{"--clickhouse-data-dir", dir}, &out); code != 0 {
		t.Fatalf("exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "embedded chdb") || !strings.Contains(out.String(), "ClickHouse 26.") {
		t.Errorf("output: %s", out.String())
	}
}

func TestMigrateServerDown(t *testing.T) {
	var out bytes.Buffer
	code := Main([]string{"--clickhouse-dsn", "clickhouse://127.0.0.1:1/auditlens?dial_timeout=200ms", "--timeout", "5s"}, &out)
	if code != 1 || !strings.Contains(out.String(), "127.0.0.1:1") {
		t.Errorf("exit %d, output %q: want 1 and the address", code, out.String())
	}
}

// The DSN's password, in the user information or as a query parameter, stays out of what
// migrate prints when the server cannot be reached.
func TestMigrateErrorHidesPassword(t *testing.T) {
	for _, dsn := range []string{
		"clickhouse://127.0.0.1:1/auditlens?username=report&password=s3cret&dial_timeout=200ms",
		"clickhouse://report:s3@cret@127.0.0.1:1/auditlens?dial_timeout=200ms",
	} {
		var out bytes.Buffer
		code := Main([]string{"--clickhouse-dsn", dsn, "--timeout", "5s"}, &out)
		if code != 1 || strings.Contains(out.String(), "s3") || strings.Contains(out.String(), "cret") || !strings.Contains(out.String(), "127.0.0.1:1") {
			t.Errorf("%s: exit %d, output %q: want 1, the address and no password", dsn, code, out.String())
		}
	}
}

// TestMigrateCluster runs `report migrate --clickhouse-cluster` twice on 2 shards x 2
// replicas: the first run creates the schema on every server, the second applies nothing.
func TestMigrateCluster(t *testing.T) {
	c := chtest.StartCluster(t, 2, 2)
	for i := range 2 {
		var out bytes.Buffer
		if code := Main([]string{"--clickhouse-dsn", c.DSN("auditlens"), "--clickhouse-cluster", c.Name}, &out); code != 0 {
			t.Fatalf("migrate run %d: exit %d\n%s", i+1, code, out.String())
		}
		want := "applied " + allMigrations()
		if i == 1 {
			want = "applied []"
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "cluster "+c.Name) {
			t.Errorf("migrate run %d: %q, want %q", i+1, out.String(), want)
		}
	}
	// With a replica down, distributed DDL would wait for it; a complete schema needs none.
	// Killed once it holds what was written (the retention's record): 18.16 refuses to start a
	// replica killed while fetching the only part of a small table (every row "suspicious").
	c.WaitReplicated(t, "auditlens")
	c.Shards[1][1].Kill()
	var out bytes.Buffer
	if code := Main([]string{"--clickhouse-dsn", c.DSN("auditlens"), "--clickhouse-cluster", c.Name, "--timeout", "20s"}, &out); code != 0 || !strings.Contains(out.String(), "applied []") {
		t.Errorf("migrate with a replica down: exit %d\n%s", code, out.String())
	}
	if err := c.Shards[1][1].Start(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range c.Servers() {
		var local, dist string
		err := srv.DB(t).QueryRow(`SELECT
    anyIf(engine, name = 'findings_local'), anyIf(engine, name = 'findings')
FROM system.tables WHERE database = 'auditlens'`).Scan(&local, &dist)
		if err != nil || local != "ReplicatedReplacingMergeTree" || dist != "Distributed" {
			t.Errorf("shard %s replica %s: findings_local %q, findings %q, %v", srv.Cluster.Shard, srv.Cluster.Replica, local, dist, err)
		}
	}
}

// allMigrations is every migration's version, as Main prints those it applied.
func allMigrations() string {
	vs := make([]int, len(store.Migrations))
	for i, m := range store.Migrations {
		vs[i] = m.Version
	}
	return fmt.Sprint(vs)
}
