package main

import (
	"flag"
	"testing"
)

func TestDataDirArg(t *testing.T) {
	t.Setenv("AUDITLENS_DATA_DIR", "/from/env")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", "/a"}, "/a"},
		{[]string{"-data-dir=/b", "--cluster", "x"}, "/b"},
		{[]string{"--cluster", "x"}, "/from/env"},
		{[]string{"--", "--data-dir", "/c"}, "/from/env"},
	} {
		if got := dataDirArg(c.args); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
}

// Flags two services share get the service's name; the report's --data-dir (its ClickHouse
// directory) is renamed, since here --data-dir is the root of all data.
func TestMergePrefixesSharedFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("cluster", "default", "common")
	merge(fs, map[string]func(*flag.FlagSet){
		"ingest": func(fs *flag.FlagSet) { fs.Int("batch-size", 1, ""); fs.String("audit-log", "", "") },
		"report": func(fs *flag.FlagSet) {
			fs.Int("batch-size", 2, "")
			fs.String("data-dir", "", "")
			fs.String("cluster", "", "")
		},
	}, []string{"ingest", "report"})
	for _, name := range []string{"ingest-batch-size", "report-batch-size", "audit-log", "clickhouse-data-dir", "cluster"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	for _, name := range []string{"batch-size", "data-dir", "report-cluster"} {
		if fs.Lookup(name) != nil {
			t.Errorf("unexpected --%s", name)
		}
	}
}
