package schedule

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/enginetest"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
	"github.com/auditlens/auditlens/services/report/weekly"
	"github.com/auditlens/auditlens/services/report/weekly/mail"
	"github.com/auditlens/auditlens/services/report/weekly/mail/mailpittest"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// logBuf is a concurrency-safe log sink to poll.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func seed(t *testing.T, st *store.Store, week weekly.Date) {
	t.Helper()
	start := week.AddDate(0, 0, -6)
	var fs []*auditlensv1.Finding
	for i := 0; i < 3; i++ {
		fs = append(fs, &auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: fmt.Sprintf("id%d", i),
			EventTime: timestamppb.New(start.Add(time.Duration(i) * time.Hour)), ApiGroup: "extensions", ApiVersion: "v1beta1",
			Resource: "ingresses", RemovedIn: "1.22", Username: "alice", UserAgent: "<script>alert(1)</script>", Namespace: "web"})
	}
	if err := st.WriteFindings(context.Background(), fs); err != nil {
		t.Fatal(err)
	}
}

func startMailpit(t *testing.T) *mailpittest.Server {
	t.Helper()
	s, err := mailpittest.Start(t.TempDir(), mailpittest.Options{})
	if err != nil {
		enginetest.Unavailable(t, "mailpit", err)
	}
	t.Cleanup(s.Close)
	return s
}

func count(t *testing.T, mp *mailpittest.Server) int {
	t.Helper()
	ms, err := mp.Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

func config(mp *mailpittest.Server, addr string) Config {
	return Config{Cron: DefaultCron, TimeZone: "UTC", Target: weekly.Version{Major: 1, Minor: 25}, Retry: time.Minute,
		Mail: mail.Config{Addr: addr, StartTLS: mail.TLSOff, From: "auditlens@example.com",
			To: flagenv.StringList{"platform@example.com"}, Timeout: 10 * time.Second}}
}

// TestSendsOncePerWeekAcrossRestarts runs the scheduler as the service would: it catches up
// on the week whose Monday 08:00 passed, then a restarted scheduler finds the week in
// weekly_reports and sends nothing.
func TestSendsOncePerWeekAcrossRestarts(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		mp := startMailpit(t)
		week := weekly.LastWeekEnding(testkit.Now().UTC())
		seed(t, st, week)
		monday9 := week.AddDate(0, 0, 1).Add(9 * time.Hour)
		var logs logBuf
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

		run := func(t *testing.T, wantLog string, wantN int) {
			s, err := New(config(mp, mp.SMTPAddr), st.DB(), st, "prod", log)
			if err != nil {
				t.Fatal(err)
			}
			s.now = func() time.Time { return monday9 }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			testkit.Eventually(t, 30*time.Second, wantLog, func() bool { return logs.count(wantLog) >= wantN })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		run(t, "weekly report sent", 1)
		if n := count(t, mp); n != 1 {
			t.Fatalf("%d messages after the first run, want 1", n)
		}
		for i := 1; i <= 2; i++ { // two restarts
			run(t, "already sent", i)
		}
		if n := count(t, mp); n != 1 {
			t.Fatalf("%d messages after restarts, want 1", n)
		}
		l := weekly.Ledger{DB: st.DB(), Ins: st}
		if got, err := l.Latest(context.Background(), "prod", week, weekly.Version{Major: 1, Minor: 25}); err != nil || got.Status != weekly.StatusSent {
			t.Fatalf("ledger %+v %v", got, err)
		}
	})
}

func TestDeliverOutcomes(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		ctx := context.Background()
		mp := startMailpit(t)
		week := weekly.LastWeekEnding(testkit.Now().UTC())
		seed(t, st, week)
		v := weekly.Version{Major: 1, Minor: 25}
		good, err := mail.New(config(mp, mp.SMTPAddr).Mail)
		if err != nil {
			t.Fatal(err)
		}
		// A port nobody listens on: the SMTP relay is down.
		down, err := mail.New(config(mp, "127.0.0.1:1").Mail)
		if err != nil {
			t.Fatal(err)
		}
		d := &Delivery{DB: st.DB(), Ledger: weekly.Ledger{DB: st.DB(), Ins: st}, Options: weekly.Options{Cluster: "prod", Target: v}}
		i := 0
		tick := func() time.Time { i++; return time.Now().UTC().Add(time.Duration(i) * time.Second) }
		d.Now = tick

		d.Sender = down
		if out, err := d.Deliver(ctx, week, false); err == nil {
			t.Fatalf("relay down: outcome %s, want an error", out)
		}
		if got, _ := d.Ledger.Latest(ctx, "prod", week, v); got.Status != weekly.StatusFailed {
			t.Fatalf("after failure: %+v, want failed", got)
		}
		d.Sender = good
		if out, err := d.Deliver(ctx, week, false); err != nil || out != Sent {
			t.Fatalf("retry after failure: %s %v", out, err)
		}
		if out, err := d.Deliver(ctx, week, false); err != nil || out != AlreadySent {
			t.Fatalf("second delivery: %s %v", out, err)
		}
		if out, err := d.Deliver(ctx, week, true); err != nil || out != Sent {
			t.Fatalf("forced delivery: %s %v", out, err)
		}
		// An attempt that died while sending is not repeated.
		prev := weekly.Date{Time: week.AddDate(0, 0, -7)}
		if err := d.Ledger.Record(ctx, "prod", prev, v, nil, weekly.StatusSending, tick()); err != nil {
			t.Fatal(err)
		}
		if out, err := d.Deliver(ctx, prev, false); err != nil || out != Interrupted {
			t.Fatalf("interrupted week: %s %v", out, err)
		}
		testkit.Eventually(t, 30*time.Second, "2 messages", func() bool { return count(t, mp) >= 2 })
		if n := count(t, mp); n != 2 {
			t.Fatalf("%d messages, want 2 (one sent, one forced)", n)
		}
	})
}

func TestCatchUp(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cron string
		loc        *time.Location
		now        time.Time
		week       string
		due        bool
	}{
		{"monday after 8", DefaultCron, time.UTC, time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), "2026-11-22", true},
		{"monday before 8", DefaultCron, time.UTC, time.Date(2026, 11, 23, 7, 59, 0, 0, time.UTC), "2026-11-22", false},
		{"wednesday", DefaultCron, time.UTC, time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC), "2026-11-22", true},
		{"sunday", DefaultCron, time.UTC, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), "2026-11-22", true},
		{"berlin 8:30 is utc 7:30", DefaultCron, berlin, time.Date(2026, 11, 23, 7, 30, 0, 0, time.UTC), "2026-11-22", true},
		{"tuesday schedule on monday", "0 8 * * 2", time.UTC, time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), "2026-11-22", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := parser.Parse(tc.cron)
			if err != nil {
				t.Fatal(err)
			}
			s := &Scheduler{sched: sched, loc: tc.loc}
			week, due := s.catchUp(tc.now)
			if week.String() != tc.week || due != tc.due {
				t.Fatalf("catchUp(%v) = %s %v, want %s %v", tc.now, week, due, tc.week, tc.due)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	good := func() Config {
		return Config{Cron: DefaultCron, TimeZone: "Europe/Berlin", Target: weekly.Version{Major: 1, Minor: 30}, Retry: time.Minute,
			Mail: mail.Config{Addr: "smtp.example.com:587", StartTLS: mail.TLSRequired, From: "a@example.com", To: flagenv.StringList{"b@example.com"}, Timeout: time.Second}}
	}
	if c := good(); !c.Enabled() || c.Validate() != nil {
		t.Fatalf("good config: enabled %v, %v", c.Enabled(), c.Validate())
	}
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string // "" means disabled, no error
	}{
		{"off", func(c *Config) { c.Cron = "off" }, ""},
		{"no recipients", func(c *Config) { c.Mail.To = nil }, ""},
		{"bad cron", func(c *Config) { c.Cron = "every monday" }, "--weekly-schedule"},
		{"bad zone", func(c *Config) { c.TimeZone = "Mars/Olympus" }, "--weekly-time-zone"},
		{"no retry", func(c *Config) { c.Retry = 0 }, "--weekly-retry"},
		{"bad mail", func(c *Config) { c.Mail.From = "nobody" }, "--mail-from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mut(&c)
			err := c.Validate()
			if tc.want == "" {
				if c.Enabled() || err != nil {
					t.Fatalf("want disabled without error, got enabled=%v %v", c.Enabled(), err)
				}
				if _, err := New(c, nil, nil, "prod", nil); err == nil {
					t.Fatal("New of a disabled schedule must fail")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error naming %s, got %v", tc.want, err)
			}
		})
	}
}

// TestFiresOnSchedule runs the real timer loop with a schedule firing every second: the week
// goes out once, and every later activation finds it sent.
func TestFiresOnSchedule(t *testing.T) {
	chtest.EachEngine(t, func(t *testing.T, e chtest.Engine, st *store.Store) {
		mp := startMailpit(t)
		week := weekly.LastWeekEnding(testkit.Now().UTC())
		seed(t, st, week)
		var logs logBuf
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c := config(mp, mp.SMTPAddr)
		c.Cron = "* * * * * *"
		s, err := New(c, st.DB(), st, "prod", log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		testkit.Eventually(t, 30*time.Second, "two activations after the send", func() bool { return logs.count("outcome=already-sent") >= 2 })
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := count(t, mp); n != 1 {
			t.Fatalf("%d messages, want 1", n)
		}
	})
}
