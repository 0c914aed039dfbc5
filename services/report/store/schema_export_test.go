package store

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the schema files in deploy/clickhouse")

// TestSchemaFiles keeps deploy/clickhouse/schema-*.sql in step with the migrations.
func TestSchemaFiles(t *testing.T) {
	for file, v := range map[string]Version{
		"schema-18.16.sql":   {18, 16},
		"schema-current.sql": {26, 7},
	} {
		got, err := SchemaSQL(DefaultDatabase, v, 400)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "..", "deploy", "clickhouse", file)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./store -run TestSchemaFiles -update)", err)
		}
		if string(want) != got {
			t.Errorf("%s is stale: go test ./store -run TestSchemaFiles -update", path)
		}
	}
}
