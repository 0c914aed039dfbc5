package pipeline_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlags: a wrong flag gets one sentence naming it and exit code 2.
func TestFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give at least one input: --audit-log, --webhook-addr"},
		{[]string{"--audit-log", dir}, "--audit-log " + dir + " is a directory"},
		{[]string{"--audit-log", filepath.Join(dir, "a.log"), "--start-at", "middle"}, `--start-at "middle"`},
		{[]string{"--webhook-addr", "127.0.0.1:0"}, "--webhook-tls-cert"},
		{[]string{"--webhook-addr", "127.0.0.1:0", "--webhook-tls-cert", "x", "--webhook-tls-key", "y"}, "client authentication"},
		{[]string{"--webhook-addr", "nonsense", "--webhook-tls-cert", "x", "--webhook-tls-key", "y", "--webhook-token-file", "z"}, "--webhook-addr \"nonsense\""},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command(ingestBin, append(tc.args, "--metrics-addr", "")...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: exit %v, want 2", tc.args, err)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q does not say %q", tc.args, stderr.String(), tc.want)
		}
	}
}
