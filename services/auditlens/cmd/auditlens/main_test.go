package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/classify"
	"github.com/auditlens/auditlens/services/ingest"
	"github.com/auditlens/auditlens/services/report"
)

func TestDataRootArg(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	withRoot := map[string]string{"AUDITLENS_DATA_ROOT": "/from/env", "AUDITLENS_DATA_DIR": "/old/env"}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--data-root", "/a"}, withRoot, "/a"},
		{[]string{"-data-root=/b", "--cluster", "x"}, withRoot, "/b"},
		{[]string{"--data-dir", "/old"}, withRoot, "/old"},
		{[]string{"--cluster", "x"}, withRoot, "/from/env"},
		{[]string{"--", "--data-root", "/c"}, withRoot, "/from/env"},
		{nil, map[string]string{"AUDITLENS_DATA_DIR": "/old/env"}, "/old/env"},
		{nil, nil, ".data"},
	} {
		if got := dataRootArg(c.args, env(c.env)); got != c.want {
			t.Errorf("%v %v: %q, want %q", c.args, c.env, got, c.want)
		}
	}
}

// The three services' flags share one flag set under their own names: none collides (a
// collision panics in registerFlags), every flag of each service is there, and the data root
// is the default of every data location.
func TestFlags(t *testing.T) {
	root := t.TempDir()
	c := configs{root: root, ingest: ingest.DefaultConfig(root), classify: classify.DefaultConfig(), report: report.DefaultConfig(root)}
	fs := flag.NewFlagSet("auditlens", flag.ContinueOnError)
	c.registerFlags(fs)

	for name, register := range map[string]func(*flag.FlagSet){
		"ingest":   func(fs *flag.FlagSet) { cfg := ingest.DefaultConfig(root); cfg.RegisterFlags(fs) },
		"classify": func(fs *flag.FlagSet) { cfg := classify.DefaultConfig(); cfg.RegisterFlags(fs) },
		"report":   func(fs *flag.FlagSet) { cfg := report.DefaultConfig(root); cfg.RegisterFlags(fs) },
	} {
		own := flag.NewFlagSet(name, flag.ContinueOnError)
		register(own)
		own.VisitAll(func(f *flag.Flag) {
			if f.Name == "data-dir" {
				return // report's deprecated name: here the data root's
			}
			got := fs.Lookup(f.Name)
			if got == nil {
				t.Errorf("%s's --%s is missing", name, f.Name)
			} else if got.DefValue != f.DefValue {
				t.Errorf("--%s defaults to %q here, %q in %s", f.Name, got.DefValue, f.DefValue, name)
			}
		})
	}
	for _, name := range []string{"audit-log", "classify-ack-wait", "report-batch-size", "clickhouse-data-dir", "data-root"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if got := fs.Lookup("clickhouse-data-dir").DefValue; got != filepath.Join(root, "chdb") {
		t.Errorf("--clickhouse-data-dir defaults to %q, want under the data root", got)
	}
	if got := fs.Lookup("checkpoint-dir"); got == nil || !strings.HasPrefix(got.DefValue, root) {
		t.Errorf("--checkpoint-dir %v: not under the data root", got)
	}

	// --data-dir is the data root's deprecated name here, not report's ClickHouse directory.
	var out strings.Builder
	fs.SetOutput(&out)
	if err := flagenv.ParseWith(fs, []string{"--data-dir", "/x", "--batch-size", "7"}, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if c.root != "/x" || c.report.Writer.BatchSize != 7 {
		t.Errorf("root %q, report batch size %d", c.root, c.report.Writer.BatchSize)
	}
	if !strings.Contains(out.String(), "--data-dir is deprecated: use --data-root") || !strings.Contains(out.String(), "--batch-size is deprecated: use --report-batch-size") {
		t.Errorf("deprecation notes: %q", out.String())
	}
}

// A data root this process cannot write gives way to a temporary directory, with a note.
func TestWritableDataRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if got, note := writableDataRoot(dir); got != dir || note != "" {
		t.Fatalf("writable %s: got %s, %q", dir, got, note)
	}
	// Under a plain file: no one, root included, can make a directory there.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, "data")
	got, note := writableDataRoot(bad)
	defer os.RemoveAll(got)
	if got == bad || !strings.Contains(note, "not writable") {
		t.Fatalf("unwritable %s: got %s, %q", bad, got, note)
	}
}
