package e2e

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/services/report/store"
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
	doc.WriteString(retentionDoc())
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

// retentionDoc is the section of the configuration reference on what each table of the store
// holds and how long, from store.Tables.
func retentionDoc() string {
	var b strings.Builder
	b.WriteString(`
## Retention and personal data

Findings name who did something: user names and service accounts, user agents, source IPs,
namespaces and object names. The report service keeps every table that holds them, the raw
findings and everything derived from them, for ` + "`--retention-days`" + ` (default 400; 0 keeps them
forever), by whole UTC days: a retention of 400 keeps today and the 399 days before. It deletes
them with a TTL on servers that have one (20.3 and later, chDB) and hourly on ClickHouse 18.16;
a finding that arrives already older than the retention is not written at all (counted in
` + "`auditlens_report_expired_on_arrival_total`" + `), and every reader (console, weekly report, readiness
gate) starts at the first day kept. When every event of a cluster lies before it (an imported
log of past years), the console, the gate and the weekly report say so and name the flag.
The counts that name no caller live ` + "`--counts-retention-days`" + ` (default 0: forever). The
report service sets both; every other command reads them from the store. Outside the store,
the bus keeps the audit events, the findings and the dead letters (which hold the bytes of what
could not be read) for ` + "`--nats-max-age`" + ` (default 7 days; on Kafka, the topics' own retention),
and the weekly e-mails sent stay in their recipients' mailboxes.

| Table | Holds | Kept |
|---|---|---|
`)
	kept := map[store.Holds]string{store.Callers: "`--retention-days`", store.Counts: "`--counts-retention-days`", store.Ledger: "forever"}
	for _, t := range store.Tables {
		b.WriteString("| `" + t.Name + "` | " + t.Holds.String() + " | " + kept[t.Holds] + " |\n")
	}
	return b.String()
}
