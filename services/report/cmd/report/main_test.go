package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/auditlens/auditlens/lib/testkit"
)

// The commands' clock is the tests' one "now" (AUDITLENS_TEST_NOW sets it).
func init() { now = testkit.Now }

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "report consumes findings"},
		{[]string{"migrate", "--help"}, 0, "applies the schema migrations"},
		{[]string{"--report-batch-size", "0"}, 2, "--report-batch-size 0"},
		// The name before the --report- prefix still works and says it is deprecated.
		{[]string{"--batch-size", "0"}, 2, "--report-batch-size 0"},
		{[]string{"--batch-size", "0"}, 2, "flag --batch-size is deprecated: use --report-batch-size"},
		{[]string{"--ack-wait", "0s"}, 2, "--report-ack-wait 0s"},
		{[]string{"migrate", "--clickhouse-dsn", "http://localhost:8123"}, 2, "native protocol"},
		{[]string{"weekly", "--data-dir", ""}, 2, "flag --data-dir is deprecated: use --clickhouse-data-dir"},
		{[]string{"--clickhouse-dsn", "http://localhost:8123"}, 2, "native protocol"},
		{[]string{"migrate", "--retention-days", "-1"}, 2, "--retention-days -1"},
		{[]string{"migrate", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, 2, "no-such-flag"},
	} {
		var out bytes.Buffer
		if code := run(c.args, &out, &out); code != c.code || !strings.Contains(out.String(), c.out) {
			t.Errorf("report %v: exit %d, want %d, output containing %q:\n%s", c.args, code, c.code, c.out, out.String())
		}
	}
}
