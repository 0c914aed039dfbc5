// Package mail sends the weekly report as an e-mail: an HTML part with inline PNG charts, a
// plain-text alternative and the blocker callers as a CSV attachment, over SMTP with
// STARTTLS and authentication.
package mail

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"net"
	netmail "net/mail"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/chart"
	"github.com/auditlens/auditlens/services/report/weekly/render"
)

// STARTTLS policies.
const (
	// TLSRequired refuses to send unless the server offers STARTTLS (the default).
	TLSRequired = "required"
	// TLSOpportunistic uses STARTTLS when offered and sends in the clear otherwise.
	TLSOpportunistic = "opportunistic"
	// TLSOff never uses STARTTLS: only for a local test server; no credentials are sent.
	TLSOff = "off"
)

// Content IDs of the inline charts, referenced from the HTML part as cid: URLs.
const (
	DailyChartID  = "daily-trend@auditlens"
	WeeklyChartID = "weekly-trend@auditlens"
)

// Config is how to reach the SMTP relay and whom to write to.
type Config struct {
	Addr         string
	User         string
	Password     string
	PasswordFile string
	StartTLS     string
	CAFile       string
	From         string
	To           flagenv.StringList
	Timeout      time.Duration
}

// DefaultConfig requires STARTTLS and gives one SMTP connection 30 seconds; the relay, the
// sender and the recipients have no default.
func DefaultConfig() Config {
	return Config{StartTLS: TLSRequired, Timeout: 30 * time.Second}
}

// RegisterFlags adds the --smtp-* and --mail-* flags to fs, each defaulting to the current
// value of its field.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "smtp-addr", c.Addr, "SMTP relay `host:port` (587 for STARTTLS submission)")
	fs.StringVar(&c.User, "smtp-user", c.User, "SMTP user name (empty: no authentication)")
	fs.StringVar(&c.Password, "smtp-password", c.Password, "SMTP password; prefer the environment twin or --smtp-password-file")
	fs.StringVar(&c.PasswordFile, "smtp-password-file", c.PasswordFile, "`file` holding the SMTP password (read at each send, trailing newline dropped)")
	fs.StringVar(&c.StartTLS, "smtp-starttls", c.StartTLS, "STARTTLS policy: required, opportunistic or off (off: plain test servers only, no auth)")
	fs.StringVar(&c.CAFile, "smtp-ca-file", c.CAFile, "PEM `file` of extra CA certificates to trust for the SMTP server")
	fs.StringVar(&c.From, "mail-from", c.From, "sender address of the weekly report, e.g. auditlens@example.com")
	fs.Var(&c.To, "mail-to", "recipient addresses of the weekly report, comma-separated or repeated")
	fs.DurationVar(&c.Timeout, "smtp-timeout", c.Timeout, "timeout of one SMTP connection")
}

// Validate checks c; it names the flag at fault.
func (c *Config) Validate() error {
	if c.Addr == "" {
		return errors.New("--smtp-addr is required to send the report")
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || host == "" {
		return fmt.Errorf("--smtp-addr %q: want host:port", c.Addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("--smtp-addr %q: bad port", c.Addr)
	}
	switch c.StartTLS {
	case TLSRequired, TLSOpportunistic, TLSOff:
	default:
		return fmt.Errorf("--smtp-starttls %q: want required, opportunistic or off", c.StartTLS)
	}
	if c.Password != "" && c.PasswordFile != "" {
		return errors.New("--smtp-password and --smtp-password-file are both set: choose one")
	}
	if c.User != "" && c.StartTLS != TLSRequired {
		return fmt.Errorf("--smtp-user is set but --smtp-starttls is %q: credentials are only sent over STARTTLS (use required)", c.StartTLS)
	}
	if c.User == "" && (c.Password != "" || c.PasswordFile != "") {
		return errors.New("an SMTP password is set but --smtp-user is empty")
	}
	if c.PasswordFile != "" {
		if _, err := c.password(); err != nil {
			return err
		}
	}
	if c.CAFile != "" {
		if _, err := c.rootCAs(); err != nil {
			return err
		}
	}
	if _, err := netmail.ParseAddress(c.From); err != nil {
		return fmt.Errorf("--mail-from %q: %w", c.From, err)
	}
	if len(c.To) == 0 {
		return errors.New("--mail-to is required to send the report")
	}
	for _, to := range c.To {
		if _, err := netmail.ParseAddress(to); err != nil {
			return fmt.Errorf("--mail-to %q: %w", to, err)
		}
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--smtp-timeout %v: want more than 0", c.Timeout)
	}
	return nil
}

func (c *Config) password() (string, error) {
	if c.PasswordFile == "" {
		return c.Password, nil
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("--smtp-password-file: %w", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", fmt.Errorf("--smtp-password-file %s is empty", c.PasswordFile)
	}
	return p, nil
}

func (c *Config) rootCAs() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	b, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--smtp-ca-file: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--smtp-ca-file %s: no PEM certificate in it", c.CAFile)
	}
	return pool, nil
}

// Message builds the e-mail of r from c.From to c.To.
func Message(c Config, r *weekly.Report) (*gomail.Msg, error) {
	daily, err := chart.Daily(r)
	if err != nil {
		return nil, err
	}
	weeklyPNG, err := chart.Weekly(r)
	if err != nil {
		return nil, err
	}
	var text, html, csv bytes.Buffer
	if err := render.Text(&text, r); err != nil {
		return nil, err
	}
	img := render.Images{Daily: template.URL("cid:" + DailyChartID), Weekly: template.URL("cid:" + WeeklyChartID)}
	if err := render.HTML(&html, r, img); err != nil {
		return nil, err
	}
	if err := render.CSV(&csv, r); err != nil {
		return nil, err
	}
	m := gomail.NewMsg()
	if err := m.From(c.From); err != nil {
		return nil, fmt.Errorf("--mail-from: %w", err)
	}
	if err := m.To(c.To...); err != nil {
		return nil, fmt.Errorf("--mail-to: %w", err)
	}
	m.Subject(render.Subject(r))
	m.SetDate()
	m.SetMessageID()
	m.SetBodyString(gomail.TypeTextPlain, text.String())
	m.AddAlternativeString(gomail.TypeTextHTML, html.String())
	for _, e := range []struct {
		name, id string
		png      []byte
	}{{"daily-trend.png", DailyChartID, daily}, {"weekly-trend.png", WeeklyChartID, weeklyPNG}} {
		if err := m.EmbedReader(e.name, bytes.NewReader(e.png), gomail.WithFileContentID("<"+e.id+">"),
			gomail.WithFileContentType("image/png")); err != nil {
			return nil, fmt.Errorf("embed %s: %w", e.name, err)
		}
	}
	if err := m.AttachReader(CSVName(r), bytes.NewReader(csv.Bytes()),
		gomail.WithFileContentType("text/csv; charset=utf-8")); err != nil {
		return nil, fmt.Errorf("attach csv: %w", err)
	}
	return m, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// CSVName is the file name of the CSV attachment of r.
func CSVName(r *weekly.Report) string {
	return fmt.Sprintf("auditlens-blockers-%s-%s-%s.csv", unsafeName.ReplaceAllString(r.Cluster, "_"), r.WeekEnding, r.Target)
}

// Sender sends reports as configured.
type Sender struct{ c Config }

// New checks c and returns a Sender.
func New(c Config) (*Sender, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Sender{c: c}, nil
}

// Send builds the e-mail of r and delivers it to --mail-to in one SMTP session.
func (s *Sender) Send(ctx context.Context, r *weekly.Report) error {
	return s.SendTo(ctx, r, s.c.To)
}

// SendTo builds the e-mail of r and delivers it to the addresses to in one SMTP session.
func (s *Sender) SendTo(ctx context.Context, r *weekly.Report, to []string) error {
	c := s.c
	c.To = to
	m, err := Message(c, r)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.c.Addr)
	p, _ := strconv.Atoi(port)
	opts := []gomail.Option{gomail.WithPort(p), gomail.WithTimeout(s.c.Timeout), gomail.WithHELO("auditlens")}
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if s.c.CAFile != "" {
		if tc.RootCAs, err = s.c.rootCAs(); err != nil {
			return err
		}
	}
	switch s.c.StartTLS {
	case TLSRequired:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory), gomail.WithTLSConfig(tc))
	case TLSOpportunistic:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSOpportunistic), gomail.WithTLSConfig(tc))
	case TLSOff:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if s.c.User != "" {
		pw, err := s.c.password()
		if err != nil {
			return err
		}
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover), gomail.WithUsername(s.c.User), gomail.WithPassword(pw))
	}
	cl, err := gomail.NewClient(host, opts...)
	if err != nil {
		return fmt.Errorf("smtp client for %s: %w", s.c.Addr, err)
	}
	if err := cl.DialAndSendWithContext(ctx, m); err != nil {
		return fmt.Errorf("send report to %s via %s: %w", strings.Join(to, ","), s.c.Addr, err)
	}
	return nil
}
