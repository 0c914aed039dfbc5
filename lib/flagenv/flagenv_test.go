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

// A list flag repeated on the command line collects every value; the first use replaces the
// default; the environment twin (when the flag is not given) replaces it too.
func TestRepeatedListFlagCollects(t *testing.T) {
	parse := func(args []string, env map[string]string) StringList {
		t.Helper()
		l := StringList{"default"}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Var(&l, "mail-to", "")
		if err := ParseWith(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		if _, ok := fs.Lookup("mail-to").Value.(*StringList); !ok {
			t.Fatal("the flag's value is not the list again after parsing")
		}
		return l
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--mail-to", "a@x", "--mail-to", "b@y,c@z"}, nil, "a@x,b@y,c@z"},
		{[]string{"--mail-to", "a@x"}, map[string]string{"AUDITLENS_MAIL_TO": "e@x"}, "a@x"},
		{nil, map[string]string{"AUDITLENS_MAIL_TO": "e@x,f@x"}, "e@x,f@x"},
		{nil, nil, "default"},
	} {
		if got := parse(tc.args, tc.env); got.String() != tc.want {
			t.Errorf("args %q env %v: %q, want %q", tc.args, tc.env, got.String(), tc.want)
		}
	}
}

func TestDeprecatedAlias(t *testing.T) {
	setup := func() (*flag.FlagSet, *int, *bool, *strings.Builder) {
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		n := fs.Int("report-batch-size", 500, "findings per insert")
		b := fs.Bool("report-verbose", false, "say more")
		Deprecated(fs, "batch-size", "report-batch-size")
		Deprecated(fs, "verbose", "report-verbose")
		return fs, n, b, &out
	}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want int
		warn bool
	}{
		{"old name on the command line", []string{"--batch-size", "7"}, nil, 7, true},
		{"old env twin", nil, map[string]string{"AUDITLENS_BATCH_SIZE": "8"}, 8, true},
		{"new name wins over old", []string{"--batch-size", "7", "--report-batch-size", "9"}, nil, 9, true},
		{"new env twin wins over old env twin", nil, map[string]string{"AUDITLENS_BATCH_SIZE": "8", "AUDITLENS_REPORT_BATCH_SIZE": "10"}, 10, false},
		{"old command line wins over new env twin", []string{"--batch-size", "7"}, map[string]string{"AUDITLENS_REPORT_BATCH_SIZE": "10"}, 7, true},
		{"neither", nil, nil, 500, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, n, _, out := setup()
			if err := ParseWith(fs, c.args, env(c.env)); err != nil {
				t.Fatal(err)
			}
			if *n != c.want {
				t.Errorf("batch size %d, want %d", *n, c.want)
			}
			warned := strings.Contains(out.String(), "flag --batch-size is deprecated: use --report-batch-size")
			if warned != c.warn {
				t.Errorf("warning %v, want %v: %q", warned, c.warn, out.String())
			}
			if strings.Count(out.String(), "deprecated") > 1 {
				t.Errorf("warned more than once: %q", out.String())
			}
		})
	}
	fs, _, b, _ := setup()
	if err := ParseWith(fs, []string{"--verbose"}, env(nil)); err != nil || !*b {
		t.Fatalf("bool alias without a value: %v %v", *b, err)
	}
	if err := ParseWith(fs, []string{"--batch-size", "x"}, env(nil)); err == nil {
		t.Fatal("bad value through the alias accepted")
	}
	// A command that gives the old name its own meaning keeps it.
	own := flag.NewFlagSet("auditlens", flag.ContinueOnError)
	root := own.String("data-dir", ".data", "root")
	own.String("clickhouse-data-dir", "", "chdb")
	Deprecated(own, "data-dir", "clickhouse-data-dir")
	if err := ParseWith(own, []string{"--data-dir", "/x"}, env(nil)); err != nil || *root != "/x" {
		t.Fatalf("own --data-dir: %q %v", *root, err)
	}
}

func TestUsageListsDeprecatedNamesApart(t *testing.T) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Duration("report-ack-wait", time.Second, "how long")
	Deprecated(fs, "ack-wait", "report-ack-wait")
	Usage(fs, "report [flags]")
	fs.Usage()
	want := "Flags (each also read from its environment twin):\n  --report-ack-wait duration\n  \thow long (env AUDITLENS_REPORT_ACK_WAIT, default \"1s\")\n\nDeprecated names, still accepted:\n  --ack-wait (AUDITLENS_ACK_WAIT): use --report-ack-wait\n"
	if !strings.HasSuffix(out.String(), want) {
		t.Errorf("usage:\n%s\nwant it to end with:\n%s", out.String(), want)
	}
}
