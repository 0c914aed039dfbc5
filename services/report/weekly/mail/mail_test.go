package mail

import (
	"bytes"
	"context"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/weekly/fixture"
	"github.com/auditlens/auditlens/services/report/weekly/mail/mailpittest"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

const (
	user     = "reporter"
	password = "s3cret-pass"
)

var servers struct {
	sync.Mutex
	plain, tls       *mailpittest.Server
	plainErr, tlsErr error
	dir              string
}

// server starts (once per test binary) the plain or the STARTTLS+auth mailpit.
func server(t *testing.T, starttls bool) *mailpittest.Server {
	t.Helper()
	servers.Lock()
	defer servers.Unlock()
	if servers.dir == "" {
		d, err := os.MkdirTemp("", "mailpit")
		if err != nil {
			t.Fatal(err)
		}
		servers.dir = d
	}
	s, err := &servers.plain, &servers.plainErr
	if starttls {
		s, err = &servers.tls, &servers.tlsErr
	}
	if *s == nil && *err == nil {
		dir := filepath.Join(servers.dir, map[bool]string{false: "plain", true: "tls"}[starttls])
		if e := os.MkdirAll(dir, 0o755); e != nil {
			t.Fatal(e)
		}
		*s, *err = mailpittest.Start(dir, mailpittest.Options{STARTTLS: starttls, User: user, Password: password})
	}
	if *err != nil {
		enginetest.Unavailable(t, "mailpit", *err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e := (*s).DeleteAll(ctx); e != nil {
		t.Fatal(e)
	}
	return *s
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, s := range []*mailpittest.Server{servers.plain, servers.tls} {
		if s != nil {
			s.Close()
		}
	}
	if servers.dir != "" {
		os.RemoveAll(servers.dir)
	}
	os.Exit(code)
}

func plainConfig(s *mailpittest.Server) Config {
	return Config{Addr: s.SMTPAddr, StartTLS: TLSOff, From: "auditlens@example.com",
		To: flagenv.StringList{"platform@example.com", "sre@example.org"}, Timeout: 10 * time.Second}
}

func TestSendArrivesWithAllParts(t *testing.T) {
	s := server(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, err := New(plainConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	r := fixture.Report()
	if err := snd.Send(ctx, r); err != nil {
		t.Fatal(err)
	}
	list, err := s.WaitMessages(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("%d messages arrived, want 1", len(list))
	}
	m, err := s.Message(ctx, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != render.Subject(r) {
		t.Errorf("subject %q, want %q", m.Subject, render.Subject(r))
	}
	if m.From.Address != "auditlens@example.com" {
		t.Errorf("from %q", m.From.Address)
	}
	var to []string
	for _, a := range m.To {
		to = append(to, a.Address)
	}
	if strings.Join(to, ",") != "platform@example.com,sre@example.org" {
		t.Errorf("to %v", to)
	}
	// The blockers are in both bodies.
	for _, want := range []string{"extensions/v1beta1 ingresses", "policy/v1beta1 podsecuritypolicies", "flowcontrol.apiserver.k8s.io/v1beta3 flowschemas"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("text part lacks blocker %q", want)
		}
		if !strings.Contains(m.HTML, want) {
			t.Errorf("HTML part lacks blocker %q", want)
		}
	}
	if strings.Contains(m.HTML, "<script>alert") || !strings.Contains(m.HTML, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("hostile user agent not escaped in the HTML part")
	}
	// Inline charts: referenced by cid from the HTML, PNG content.
	if len(m.Inline) != 2 {
		t.Fatalf("%d inline parts, want 2: %+v", len(m.Inline), m.Inline)
	}
	ids := map[string]bool{}
	for _, p := range m.Inline {
		ids[p.ContentID] = true
		if p.ContentType != "image/png" {
			t.Errorf("inline %s content type %q", p.FileName, p.ContentType)
		}
		if !strings.Contains(m.HTML, `src="cid:`+p.ContentID+`"`) {
			t.Errorf("HTML does not reference inline part cid:%s", p.ContentID)
		}
		b, err := s.Part(ctx, m.ID, p.PartID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(b)); err != nil {
			t.Errorf("inline %s is not a PNG: %v", p.FileName, err)
		}
	}
	if !ids[DailyChartID] || !ids[WeeklyChartID] {
		t.Errorf("inline content ids %v, want %s and %s", ids, DailyChartID, WeeklyChartID)
	}
	// The CSV attachment is the CSV rendering of the report.
	if len(m.Attachments) != 1 {
		t.Fatalf("%d attachments, want 1", len(m.Attachments))
	}
	a := m.Attachments[0]
	if a.FileName != "auditlens-blockers-prod-eu-2026-11-22-1.32.csv" || !strings.HasPrefix(a.ContentType, "text/csv") {
		t.Errorf("attachment %q %q", a.FileName, a.ContentType)
	}
	got, err := s.Part(ctx, m.ID, a.PartID)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := render.CSV(&want, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("CSV attachment differs:\n%s\nwant:\n%s", got, want.Bytes())
	}
}

func TestSendSTARTTLSWithAuth(t *testing.T) {
	s := server(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := plainConfig(s)
	c.StartTLS, c.CAFile, c.User, c.PasswordFile = TLSRequired, s.CAFile, user, pwFile
	snd, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, fixture.Report()); err != nil {
		t.Fatal(err)
	}
	list, err := s.WaitMessages(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if list[0].Subject != render.Subject(fixture.Report()) {
		t.Fatalf("subject %q", list[0].Subject)
	}

	t.Run("wrong password", func(t *testing.T) {
		c := c
		c.PasswordFile, c.Password = "", "wrong"
		snd, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(ctx, fixture.Report()); err == nil {
			t.Fatal("sent with a wrong password")
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		c := c
		c.CAFile = ""
		snd, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(ctx, fixture.Report()); err == nil {
			t.Fatal("sent to a server whose certificate is not trusted")
		}
	})
	t.Run("server requires STARTTLS", func(t *testing.T) {
		c := c
		c.StartTLS, c.User, c.PasswordFile = TLSOff, "", ""
		snd, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(ctx, fixture.Report()); err == nil {
			t.Fatal("sent in the clear to a server requiring STARTTLS")
		}
	})
	if list, err := s.Messages(ctx); err != nil || len(list) != 1 {
		t.Fatalf("want only the one good message, got %d (%v)", len(list), err)
	}
}

func TestRequiredTLSRefusesPlainServer(t *testing.T) {
	s := server(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := plainConfig(s)
	c.StartTLS = TLSRequired
	snd, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, fixture.Report()); err == nil {
		t.Fatal("sent without TLS although STARTTLS is required")
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := func() Config {
		return Config{Addr: "smtp.example.com:587", StartTLS: TLSRequired, User: "u", Password: "p",
			From: "a@example.com", To: flagenv.StringList{"b@example.com"}, Timeout: time.Second}
	}
	if c := good(); c.Validate() != nil {
		t.Fatalf("good config rejected: %v", c.Validate())
	}
	for _, tc := range []struct {
		name, want string
		mut        func(*Config)
	}{
		{"no addr", "--smtp-addr", func(c *Config) { c.Addr = "" }},
		{"addr without port", "--smtp-addr", func(c *Config) { c.Addr = "smtp.example.com" }},
		{"bad port", "--smtp-addr", func(c *Config) { c.Addr = "h:99999" }},
		{"bad policy", "--smtp-starttls", func(c *Config) { c.StartTLS = "yes" }},
		{"auth without tls", "--smtp-starttls", func(c *Config) { c.StartTLS = TLSOff }},
		{"both passwords", "--smtp-password-file", func(c *Config) { c.PasswordFile = empty }},
		{"empty password file", "is empty", func(c *Config) { c.Password, c.PasswordFile = "", empty }},
		{"missing password file", "--smtp-password-file", func(c *Config) { c.Password, c.PasswordFile = "", filepath.Join(dir, "nope") }},
		{"password without user", "--smtp-user", func(c *Config) { c.User = "" }},
		{"bad ca file", "--smtp-ca-file", func(c *Config) { c.CAFile = empty }},
		{"bad from", "--mail-from", func(c *Config) { c.From = "not an address" }},
		{"no to", "--mail-to", func(c *Config) { c.To = nil }},
		{"bad to", "--mail-to", func(c *Config) { c.To = flagenv.StringList{"x@example.com", "<oops"} }},
		{"no timeout", "--smtp-timeout", func(c *Config) { c.Timeout = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mut(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error naming %s, got %v", tc.want, err)
			}
		})
	}
}

func TestFlagsHaveEnvTwins(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c := DefaultConfig()
	c.RegisterFlags(fs)
	env := map[string]string{"AUDITLENS_SMTP_PASSWORD": "from-env", "AUDITLENS_MAIL_TO": "a@example.com, b@example.com"}
	if err := flagenv.ParseWith(fs, []string{"--smtp-addr", "h:25"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Password != "from-env" || len(c.To) != 2 || c.StartTLS != TLSRequired || c.Addr != "h:25" {
		t.Fatalf("%+v", c)
	}
}
