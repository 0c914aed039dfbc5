package e2e

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the binaries' --help")

// The configuration reference is the binaries' own --help, so it cannot drift from the code:
// this test regenerates it and fails when the committed file differs (go test -update fixes it).
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	var doc bytes.Buffer
	doc.WriteString("# Configuration reference\n\nGenerated from each command's `--help` by `go test ./e2e -update` in\n" +
		"`services/auditlens`; a test fails when it is stale. Every flag also reads its environment twin\n" +
		"(`--nats-url` is `AUDITLENS_NATS_URL`); a flag on the command line wins.\n")
	for _, c := range [][]string{
		{"ingest"}, {"classify"}, {"classify", "scan"}, {"classify", "manifests"}, {"classify", "catalogue"},
		{"report"}, {"report", "migrate"}, {"report", "weekly"}, {"report", "readiness"}, {"auditlens"},
	} {
		cmd := exec.Command(filepath.Join(bin, c[0]), append(c[1:], "--help")...)
		cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin"} // defaults, not this machine's env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", strings.Join(c, " "), err, out)
		}
		// The node name defaults to the host name: print the placeholder instead.
		host, _ := os.Hostname()
		text := strings.ReplaceAll(string(out), `default "`+host+`"`, `default: the host name`)
		doc.WriteString("\n## `" + strings.Join(c, " ") + "`\n\n```text\n" + strings.TrimRight(text, "\n") + "\n```\n")
	}
	path := "../../../docs/configuration.md"
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, doc.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./e2e -run Configuration -update)", err)
	}
	if !bytes.Equal(got, doc.Bytes()) {
		t.Fatal("docs/configuration.md is stale: run `go test ./e2e -run Configuration -update` in services/auditlens")
	}
}
