package flagenv

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseEnvTwins(t *testing.T) {
	env := map[string]string{
		"AUDITLENS_NATS_URL":  "nats://env:4222",
		"AUDITLENS_CLUSTER":   "from-env",
		"AUDITLENS_MAX_WAIT":  "3s",
		"AUDITLENS_UNRELATED": "x",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	url := fs.String("nats-url", "embedded", "")
	cluster := fs.String("cluster", "default", "")
	wait := fs.Duration("max-wait", time.Second, "")
	keep := fs.String("keep", "d", "")
	if err := ParseWith(fs, []string{"--cluster", "from-flag"}, lookup); err != nil {
		t.Fatal(err)
	}
	if *url != "nats://env:4222" || *cluster != "from-flag" || *wait != 3*time.Second || *keep != "d" {
		t.Fatalf("got url=%q cluster=%q wait=%v keep=%q", *url, *cluster, *wait, *keep)
	}
}

func TestParseBadEnvNamesVariable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("max-wait", time.Second, "")
	err := ParseWith(fs, nil, func(k string) (string, bool) { return "soon", k == "AUDITLENS_MAX_WAIT" })
	if err == nil || !strings.Contains(err.Error(), "AUDITLENS_MAX_WAIT") {
		t.Fatalf("want error naming AUDITLENS_MAX_WAIT, got %v", err)
	}
}

func TestUsageListsTwins(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.String("nats-url", "embedded", "NATS `URL`")
	Usage(fs, "t [flags]")
	fs.Usage()
	if !strings.Contains(out.String(), "AUDITLENS_NATS_URL") || !strings.Contains(out.String(), `default "embedded"`) {
		t.Fatalf("usage:\n%s", out.String())
	}
	fs.SetOutput(io.Discard)
}

func TestStringList(t *testing.T) {
	var l StringList
	if err := l.Set(" a, b,,c "); err != nil || l.String() != "a,b,c" {
		t.Fatalf("got %q %v", l.String(), err)
	}
}
