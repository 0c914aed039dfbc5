package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanIsDispatchedBeforeTheDaemon(t *testing.T) {
	f := filepath.Join(t.TempDir(), "audit.log")
	ev := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","verb":"list","objectRef":{"resource":"cronjobs","apiGroup":"batch","apiVersion":"v1beta1"}}`
	if err := os.WriteFile(f, []byte(ev+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"scan", "--target-version", "1.25", f}, strings.NewReader(""), &out, &errOut); code != 3 {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"rule_id":"removed-api"`) {
		t.Errorf("stdout %s", out.String())
	}
}

func TestDaemonFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--help"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"classify scan", "--rules-file", "AUDITLENS_RULES_FILE", "--classify-group", "--nats-url"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	errOut.Reset()
	if code := run([]string{"--rules-file", "/no/such/rules.yaml"}, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--rules-file") {
		t.Errorf("missing rules file: exit %d, %s", code, errOut.String())
	}
}

// A bad flag value is one sentence naming the flag, prefixed once with the command's name.
func TestNegativeFlagsNamed(t *testing.T) {
	for _, flag := range []string{"--classify-workers", "--classify-batch-size", "--classify-max-event-size", "--classify-dedup-window", "--classify-max-unacked", "--classify-findings-message-bytes"} {
		var out, errOut bytes.Buffer
		code := run([]string{flag, "-1"}, nil, &out, &errOut)
		if want := "classify: " + flag + " -1: want 1 or more\n"; code != 2 || errOut.String() != want {
			t.Errorf("%s -1: exit %d, %q, want 2 and %q", flag, code, errOut.String(), want)
		}
	}
}

// As the kubectl plugin the binary names itself so and runs the offline commands only: no
// command, or an unknown one, is a usage error instead of starting the classify service.
func TestPlugin(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runPlugin([]string{"--help"}, nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "kubectl auditlens scan") || strings.Contains(out.String(), "--nats-url") {
		t.Errorf("--help: exit %d, stdout %q", code, out.String())
	}
	out.Reset()
	if code := runPlugin(nil, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage: kubectl auditlens") {
		t.Errorf("no command: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := runPlugin([]string{"--nats-url", "nats://x"}, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "--nats-url"`) {
		t.Errorf("service flags: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := runPlugin([]string{"catalogue", "--from", "1.24", "--to", "1.25", "--format", "json"}, nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "podsecuritypolicies") {
		t.Errorf("catalogue: exit %d, stdout %.200q, stderr %q", code, out.String(), errOut.String())
	}
}
