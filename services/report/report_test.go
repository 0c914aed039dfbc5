package report

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/auditlens/auditlens/lib/bus"
	"github.com/auditlens/auditlens/lib/bus/natsbus"
	"github.com/auditlens/auditlens/lib/daemon"
	"github.com/auditlens/auditlens/lib/flagenv"
	"github.com/auditlens/auditlens/lib/testkit"
	auditlensv1 "github.com/auditlens/auditlens/proto/auditlens/v1"
	"github.com/auditlens/auditlens/services/report/chdb"
	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/store"
)

func TestMain(m *testing.M) { chtest.Main(m) }

// TestNewEmbeddedService wires the service as the report binary does, with no
// --clickhouse-dsn (embedded chDB), runs its stages and stops them upstream first. A first
// start logs no warning: the compaction and the readiness gate wait for the schema.
func TestNewEmbeddedService(t *testing.T) {
	dir := chtest.EmbeddedDir(t)
	c := DefaultConfig(t.TempDir())
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--clickhouse-data-dir", dir, "--report-batch-max-wait", "50ms", "--report-console-addr", ""}); err != nil {
		t.Fatal(err)
	}
	b := openBus(t)
	warns := &warnings{}
	comps, err := New(c, daemon.Deps{Bus: b, Cluster: "prod", Logger: slog.New(warns)})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 5 {
		t.Fatalf("%d components, want the writer, the compaction of the finding days, the retention's deletion, the readiness gate and the store closer (no weekly schedule without --mail-to)", len(comps))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.RunStages(ctx, comps, slog.New(slog.DiscardHandler)) }()
	if err := b.Publish(ctx, messages("svc", 50)...); err != nil {
		t.Fatal(err)
	}
	st, err := chdb.Open(ctx, dir, store.DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testkit.Eventually(t, time.Minute, "50 findings in embedded ClickHouse", func() bool { return distinct(t, st) == 50 })
	testkit.Eventually(t, time.Minute, "ready", func() bool { return comps[0].Ready() == nil })
	// The gate and the compaction run their first round as soon as the schema is there.
	time.Sleep(2 * time.Second)
	if w := warns.String(); w != "" {
		t.Errorf("a first start logged warnings:\n%s", w)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stages did not stop")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
	}{
		{"batch size", func(c *Config) { c.Writer.BatchSize = 0 }},
		{"max wait", func(c *Config) { c.Writer.MaxWait = 0 }},
		{"retry", func(c *Config) { c.Writer.RetryMin, c.Writer.RetryMax = time.Second, time.Millisecond }},
		{"dsn", func(c *Config) { c.Engine.DSN = "http://localhost:8123" }},
		{"retention", func(c *Config) { c.Engine.RetentionDays = -1 }},
		{"readiness window", func(c *Config) { c.Readiness.Window = time.Second }},
		{"readiness silence", func(c *Config) { c.Readiness.MaxSilence = 2 * c.Readiness.Window }},
		{"readiness objects without interval", func(c *Config) { c.ReadinessObjects.Enabled, c.Readiness.Interval = true, 0 }},
		{"readiness kube token without url", func(c *Config) { c.Kube.TokenFile = "/t" }},
	} {
		cfg := DefaultConfig(t.TempDir())
		if err := cfg.Validate(); err != nil {
			t.Fatalf("DefaultConfig does not validate: %v", err)
		}
		c.mod(&cfg)
		before := fmt.Sprintf("%+v", cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", c.name, cfg)
		}
		if after := fmt.Sprintf("%+v", cfg); after != before {
			t.Errorf("%s: Validate changed the config:\n%s\n%s", c.name, before, after)
		}
	}
}

// TestDeprecatedFlags: the flags' names before the --report- prefix, and --data-dir for
// --clickhouse-data-dir, still set the same fields, from the command line and from their
// environment twins, and each use says it is deprecated.
func TestDeprecatedFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		env        map[string]string
		deprecated bool
	}{
		{args: []string{"--batch-size", "7", "--consumer-group", "g", "--data-dir", "/x/chdb"}, deprecated: true},
		{env: map[string]string{"AUDITLENS_BATCH_SIZE": "7", "AUDITLENS_CONSUMER_GROUP": "g", "AUDITLENS_DATA_DIR": "/x/chdb"}, deprecated: true},
		{args: []string{"--report-batch-size", "7", "--report-consumer-group", "g", "--clickhouse-data-dir", "/x/chdb"}},
	} {
		c := DefaultConfig(t.TempDir())
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		c.RegisterFlags(fs)
		if err := flagenv.ParseWith(fs, tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		if c.Writer.BatchSize != 7 || c.Writer.Group != "g" || c.Engine.DataDir != "/x/chdb" {
			t.Errorf("%v %v: batch size %d, group %q, data dir %q", tc.args, tc.env, c.Writer.BatchSize, c.Writer.Group, c.Engine.DataDir)
		}
		for _, d := range [][2]string{{"batch-size", "report-batch-size"}, {"consumer-group", "report-consumer-group"}, {"data-dir", "clickhouse-data-dir"}} {
			msg := "flag --" + d[0] + " is deprecated: use --" + d[1]
			if got := strings.Contains(out.String(), msg); got != tc.deprecated {
				t.Errorf("%v %v: output %q; want %q: %v", tc.args, tc.env, out.String(), msg, tc.deprecated)
			}
		}
	}
}

func openBus(t testing.TB) *natsbus.Bus {
	t.Helper()
	b, err := natsbus.Open(context.Background(), natsbus.Config{URL: natsbus.Embedded, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded nats: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// messages is n findings, one per message.
func messages(prefix string, n int) []bus.Message {
	out := make([]bus.Message, n)
	for i := range out {
		id := fmt.Sprintf("%s-%d", prefix, i)
		data, err := proto.Marshal(&auditlensv1.Finding{RuleId: "removed-api", Cluster: "prod", AuditId: id,
			EventTime: timestamppb.New(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)), ApiGroup: "extensions",
			ApiVersion: "v1beta1", Resource: "ingresses", RemovedIn: "1.22"})
		if err != nil {
			panic(err)
		}
		out[i] = bus.Message{Stream: bus.Findings, Cluster: "prod", ID: id, Data: data}
	}
	return out
}

// distinct counts findings by identity.
func distinct(t testing.TB, st *store.Store) uint64 {
	t.Helper()
	var n uint64
	if err := st.DB().QueryRow("SELECT uniqExact(cluster, rule_id, audit_id) FROM findings").Scan(&n); err != nil {
		return 0
	}
	return n
}

// warnings is a slog handler that keeps the records at WARN and above.
type warnings struct {
	mu   sync.Mutex
	recs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	w.mu.Lock()
	w.recs = append(w.recs, line)
	w.mu.Unlock()
	return nil
}

func (w *warnings) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.recs, "\n")
}
